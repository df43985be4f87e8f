"""This repository's own CLI commands (`[tool.jobfence] commands` in pyproject.toml): its simulated day, its
fault simulator's campaigns and the club's signing-key rotation. They run on this app only, so they live
here, not in the operator tooling (`jobfence_ops`), which adds them to `jobfence` when this app is the one found.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from jobfence_ops.app import AppCommand
from jobfence_ops.render import print_json
from jobfence_ops.targets import AwsTarget


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=7, help="makes a run reproducible")
    p.add_argument("--hours", type=float, default=None, help="simulated hours (default: the full day)")
    p.add_argument("--no-live", action="store_true", help="plain output instead of the live view")


def _demo(args: argparse.Namespace, console: Console, _target: Any) -> int:
    from ops.demo import demo

    return demo(seed=args.seed, hours=args.hours, live=not args.no_live, console=console)


def _sim_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", default="0:100", help="A:B runs seeds A..B-1 (default 0:100)")
    p.add_argument("--replay", type=int, default=None, metavar="SEED", help="run one seed, print its trace")
    p.add_argument("--family", default=None, help="one family (default: seed N runs family N mod #families)")
    p.add_argument("--jobs", type=int, default=1, help="processes (default 1)")


def _sim(args: argparse.Namespace, console: Console, _target: Any) -> int:
    """Exit 0 when no seed broke an invariant, 1 otherwise."""
    from ops.sim.campaign import campaign, parse_seeds, run_one

    if args.replay is not None:
        report = run_one(
            args.replay,
            args.family,
            echo=lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True),
        )
        for violation in report.violations:
            console.print(
                f"invariant {violation.number}: {violation.text}", markup=False, highlight=False, soft_wrap=True
            )
        console.print(
            f"seed {report.seed} ({report.family}): {'ok' if report.ok else 'VIOLATED'}; "
            f"faults injected: {', '.join(sorted(k.value for k in report.injected)) or 'none'}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return 0 if report.ok else 1
    result = campaign(parse_seeds(args.seeds), args.family, jobs=args.jobs)
    console.print("\n".join(result.lines()), markup=False, highlight=False, soft_wrap=True)
    return 0 if not result.failed else 1


def signing_job(text: str) -> str:
    """A club job that has its own event signing key (`rotate-signing-key JOB`)."""
    from jobs.club.catalog import SIGNER_EVENTS

    if text not in SIGNER_EVENTS:
        raise argparse.ArgumentTypeError(
            f"{text[:64]!r} has no event signing key; jobs with one: {', '.join(sorted(SIGNER_EVENTS))}"
        )
    return text


def _rotate_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "job",
        type=signing_job,
        help="the job whose key to rotate (its secrets club_signing_key_JOB, club_verify_key_JOB)",
    )
    r.add_argument("--revoke", action="store_true", help="then drop the old public key at once (a suspected leak)")
    r.add_argument("--role-arn", default=None, help="the break-glass role (default: the stack's BreakGlassRoleArn)")


def _rotate(args: argparse.Namespace, console: Console, target: Any) -> int:
    from ops.rotation import rotate_here, rotate_in_account

    if isinstance(target, AwsTarget):  # the deployed policies: through Secrets Manager, as the break-glass role
        rotation = rotate_in_account(target, args.job, revoke=args.revoke, role_arn=args.role_arn)
    else:
        rotation = rotate_here(target, args.job, revoke=args.revoke)
    if args.json:
        print_json(
            console,
            {
                "version": rotation.version,
                "kid": rotation.kid,
                "verify_secret": rotation.verify_secret,
                "signing_secret": rotation.signing_secret,
                "revoked": rotation.revoked,
            },
        )
        return 0
    kid = f" (key {rotation.kid})" if rotation.kid else ""
    console.print(
        f"signing key of {args.job} rotated: version {rotation.version}{kid} is current in {rotation.verify_secret} (public) "
        f"and {rotation.signing_secret} (private)",
        markup=False,
    )
    if args.revoke:
        console.print(
            "the previous public key is revoked" if rotation.revoked else "no previous public key to revoke",
            markup=False,
        )
    return 0


COMMANDS = {
    "demo": AppCommand(
        "the simulated day on a fresh embedded runtime, then the invariant check", _demo_arguments, _demo
    ),
    "sim": AppCommand(
        "the deterministic fault simulator (in-process moto): a campaign, or one traced seed", _sim_arguments, _sim
    ),
    "rotate-signing-key": AppCommand(
        "rotate one club job's event signing key pair now (public half first); --revoke drops the old one",
        _rotate_arguments,
        _rotate,
        on_target=True,
    ),
}
