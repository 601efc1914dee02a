"""``vigil erase --tenant T --user U``: forget a subject, for operators (DESIGN.md §10).

Sends the ``erase`` command as the operator after a confirmation (``--yes`` skips it; no terminal
means no) and prints what was shredded, what erasure cannot reach and how long ciphertext and ids
remain in the topics (or ``--json``); a refusal prints one line and exits 1. Left out: the rule
(``pipeline.rules.commands.apply``) and what each consumer does with the erasure record."""

from __future__ import annotations

from typing import Any, Final

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.cli.options import subject_option, timeout_option
from pipeline.cli.round_trip import report, send_command
from pipeline.kafka.topics import SPECS, Topic
from pipeline.rules.commands import CommandVerb
from pipeline.rules.durations import format_duration

__all__ = ["erase", "erasure_reach", "render_erased"]

NOT_REACHED: Final = (
    "deliveries already made: webhook receivers, chat messages, log destinations, scripts",
    "the events topic: the publishers' own records, under their retention",
    "process logs, and backups or mirrors of the topics",
)


def erasure_reach() -> dict[str, Any]:
    """What erasure leaves, and for how long (from the topic specs vigil applies)."""
    sealed = {s.topic.value: s.record_lifetime() for s in SPECS.values() if s.sealed}
    longest = max(sealed, key=lambda name: sealed[name])
    return {
        "not_reached": list(NOT_REACHED),
        "ciphertext_remains": format_duration(sealed[longest]),
        "ciphertext_remains_in": longest,
        "wrapped_keys_remain": format_duration(SPECS[Topic.KEYS].record_lifetime()),
    }


def render_erased(result: dict[str, Any]) -> str:
    """What was shredded, then the erased watcher ids, then what erasure cannot reach and how
    long ciphertext stays in the topics."""
    ids = [str(i) for i in result.get("watcher_ids", [])]
    count = int(result.get("erased", len(ids)))
    noun = "watcher" if count == 1 else "watchers"
    keys = int(result.get("keys_shredded", 0))
    grants = int(result.get("grants_revoked", 0))
    head = (
        f"erased {result.get('tenant_id')}/{result.get('user_id')}: {count} {noun}, "
        f"{keys} data {'key' if keys == 1 else 'keys'} shredded, "
        f"{grants} {'grant' if grants == 1 else 'grants'} revoked"
    )
    reach = {**erasure_reach(), **{k: v for k, v in result.items() if k in _REACH}}
    return "\n".join(
        [
            head,
            *(f"  {watcher_id}" for watcher_id in ids),
            "shredded: every sealed field of the subject (definitions, commands and results,"
            " receipts, tick payloads, outbox, ledger and dead-letter texts) reads as erased"
            " in every topic and process from now on",
            "not reached (copies outside Kafka):",
            *(f"  {item}" for item in reach["not_reached"]),
            f"ciphertext remains at most {reach['ciphertext_remains']}"
            f" ({reach['ciphertext_remains_in']} retention); the shredded keys' wrapped records"
            f" leave the keys topic within {reach['wrapped_keys_remain']}; identifiers and"
            " decision codes (ids, times, outcomes) stay in plaintext until the same bounds",
        ]
    )


_REACH: Final = frozenset(
    {"not_reached", "ciphertext_remains", "ciphertext_remains_in", "wrapped_keys_remain"}
)


@click.command()
@subject_option(required=True, help="The subject to erase.")
@click.option("--yes", is_flag=True, help="Erase without asking for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@timeout_option
@click.pass_context
@pass_state
def erase(
    state: CliState,
    ctx: click.Context,
    tenant: str | None,
    user: str | None,
    yes: bool,
    as_json: bool,
    timeout: float,
) -> None:
    """Erase a subject: every watcher of TENANT/USER, everywhere vigil keeps it.

    For operators (vigil --as-operator erase …). The subject's data keys are shredded
    (everything sealed under them reads as erased at once, in every topic), its watchers,
    grants, state, undelivered notifications and budget keys are removed; this cannot be
    undone. Prints what it could not reach and how long ciphertext remains. Asks first unless
    --yes. A grant of the subject must still let it be managed (seed 000).

    \b
    Example:
      vigil --as-operator erase --subject acme/u-42
      vigil erase --subject acme/u-42 --yes --json --as-operator
    """
    ctx.find_root().meta["vigil.timeout"] = timeout
    if not yes:
        click.confirm(
            f"Erase every watcher of tenant {tenant!r} user {user!r}? This cannot be undone.",
            abort=True,
            err=True,
        )
    result = send_command(state, CommandVerb.ERASE, tenant, user, operator_verb=True)
    if result.ok and result.result is not None:
        result = result.model_copy(update={"result": {**result.result, **erasure_reach()}})
    report(result, as_json, render_erased)
