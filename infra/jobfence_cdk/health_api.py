"""`HealthApi`: an HTTP API (GET / and GET /health) -> the health function, throttled hard.

The function (`handlers.health.handler`) answers the service name and the
configured job count, nothing else: it has no table, queue or secret access.
The default stage allows 10 requests a minute (burst 10), so the endpoint
cannot be used to run up cost; access logs are structured JSON.
"""

from __future__ import annotations

import json

import jsii
from aws_cdk import Aws, CfnOutput, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_logs as logs
from constructs import Construct

from jobfence_cdk.code import FunctionCode
from jobfence_cdk.function import LOG_RETENTION, ServiceFunction
from jobfence_cdk.nag import acknowledge

HEALTH_HANDLER = "handlers.health.handler"
RATE_PER_SECOND = 10 / 60  # 10 requests a minute
BURST = 10

_ACCESS_LOG = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime",
    "routeKey": "$context.routeKey",
    "status": "$context.status",
    "responseLength": "$context.responseLength",
    "integrationError": "$context.integrationErrorMessage",
}


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogs:
    """Structured JSON access logs into `log_group` (an interface, not a struct, in jsii)."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._destination = apigwv2.LogGroupLogDestination(log_group)

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(json.dumps(_ACCESS_LOG))


class HealthApi(Construct):
    """Attributes: `api`, `stage`, `function`, `url`."""

    def __init__(self, scope: Construct, construct_id: str, *, code: FunctionCode, prefix: str) -> None:
        super().__init__(scope, construct_id)
        service = ServiceFunction(
            self,
            "Health",
            code=code,
            function_name=f"{prefix}-health",
            handler=HEALTH_HANDLER,
            timeout_s=10,
            memory_mb=256,
            environment={
                "POWERTOOLS_SERVICE_NAME": "health",
            },
            description="health endpoint: service name and configured job count",
        )
        self.function = service.function
        self.api = apigwv2.HttpApi(self, "Api", api_name=f"{prefix}-health", create_default_stage=False)
        integration = integrations.HttpLambdaIntegration("Health", self.function)
        for path in ("/", "/health"):
            self.api.add_routes(path=path, methods=[apigwv2.HttpMethod.GET], integration=integration)
        access_logs = logs.LogGroup(self, "AccessLogs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.api,
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(rate_limit=RATE_PER_SECOND, burst_limit=BURST),
            access_log_settings=_AccessLogs(access_logs),
        )
        # Built from the API id (a Ref), not GetAtt ApiEndpoint: the emulator's CloudFormation
        # (local runtime) rejects outputs that GetAtt a resource type it does not model.
        self.url = f"https://{self.api.api_id}.execute-api.{Aws.REGION}.{Aws.URL_SUFFIX}/"
        CfnOutput(self, "Url", value=self.url, description="health endpoint (GET / or /health)")
        for route in self.api.node.find_all():
            if isinstance(route, apigwv2.CfnRoute):
                acknowledge(
                    route,
                    "AwsSolutions-APIG4",
                    "public health check by design: reveals only service name and job count",
                )
        acknowledge(self.stage, "Serverless-APIGWXrayTracing", "HTTP APIs do not support X-Ray tracing")
