"""One Lambda function of the stack: its own role, its own log group, the shared code.

Every function gets a role of its own with no managed policy: it may write its
own log group and X-Ray segments, and whatever `Access` grants it from the
catalog, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from jobfence_cdk.code import FunctionCode
from jobfence_cdk.nag import acknowledge

LOG_RETENTION = logs.RetentionDays.ONE_MONTH


class ServiceFunction(Construct):
    """A function running `handler` from the code asset, on the code's runtime and architecture (`FunctionCode`:
    by default the newest Python runtime, `jobfence_cdk.code.RUNTIME`, on arm64).

    Attributes: `function`, `role`, `log_group`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: FunctionCode,
        function_name: str,
        handler: str,
        timeout_s: int,
        memory_mb: int,
        environment: Mapping[str, str],
        description: str,
        retry_attempts: int | None = None,
        on_failure: sqs.IQueue | None = None,
        caller: str = "SQS event source or API",  # who invokes it synchronously when there is no on_failure
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{function_name}: only what its catalog entry uses",
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        self.log_group.grant_write(self.role)
        destination = None
        if on_failure is not None:
            from aws_cdk import aws_lambda_destinations as destinations

            destination = destinations.SqsDestination(on_failure)
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=function_name,
            description=description[:256],
            runtime=code.runtime,
            architecture=code.architecture,
            handler=handler,
            code=code.code,
            layers=[code.layer],
            timeout=Duration.seconds(timeout_s),
            memory_size=memory_mb,
            environment=dict(environment),
            role=self.role,
            log_group=self.log_group,
            tracing=lambda_.Tracing.ACTIVE,
            retry_attempts=retry_attempts,
            on_failure=destination,
            reserved_concurrent_executions=reserved_concurrency,
        )
        acknowledge(
            self.role,
            "AwsSolutions-IAM5[Resource::*]",
            "X-Ray PutTraceSegments/PutTelemetryRecords support no resource-level permissions",
        )
        acknowledge(
            self.function,
            "Serverless-LambdaDLQ",
            "async failures go to an on-failure destination queue (records more than a DLQ)"
            if on_failure is not None
            else f"never invoked asynchronously ({caller}): failures stay with the caller",
        )
