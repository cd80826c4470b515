"""What a tool call's classification says (:class:`CallClass`) and the verbs that decide
it, shared by tool names (:mod:`.commands`) and command lines (:mod:`.shell`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CREATE_VERBS", "MODIFY_VERBS", "READ_VERBS", "WRITE_VERBS", "CallClass"]


@dataclass(frozen=True, slots=True)
class CallClass:
    """Result of classifying one tool call.

    ``mutating``: ``True`` mutates state, ``False`` read-only, ``None`` unknown.
    ``command``: the shell command line for shell-like tools, else ``None``.
    ``domains``: resource domains touched (read or written).
    ``reason``: short human explanation (``"git reset"``, ``"verb get_"``).
    """

    mutating: bool | None
    command: str | None = None
    domains: frozenset[str] = frozenset()
    reason: str = ""



READ_VERBS = (
    "get", "list", "read", "search", "view", "show", "describe", "find", "fetch", "query", "lookup",
    "look", "inspect", "check", "status", "grep", "glob", "ls", "cat", "head", "tail", "browse",
    "open", "retrieve", "count", "explain", "diff", "watch", "peek", "preview", "stat", "download",
    "summarize", "analyze", "validate", "info", "is", "has", "can", "print", "web", "lint", "test",
    "plan", "dry", "estimate", "recall", "history", "log", "logs", "ask", "think", "todo_read", "todoread",
)
#: Verbs of a step that makes something new (what it returns is minted: PRINCIPLES §2a) and
#: of one that changes what exists. One vocabulary: the call classifier (a tool's name,
#: an unknown command's words) and the provenance evidence (:mod:`.evidence`) read the
#: same verbs, so a step one calls state-changing the other does not call a read.
CREATE_VERBS = frozenset(
    """create new run launch add insert post make generate mint issue acquire start submit upload
    put allocate provision register open init fork clone copy backup snapshot export grant begin
    initiate reserve claim lease lock receive enqueue send publish push commit tag deploy build
    checkout request order book schedule trigger dispatch spawn login signin authenticate auth
    take""".split()
)
MODIFY_VERBS = frozenset(
    """update modify patch set edit change configure scale restart rename move delete remove destroy
    terminate stop cancel rollback revert reset release unlock disable enable switch promote flip
    resize rotate replace upgrade downgrade apply migrate""".split()
)
_WRITE_VERBS = (
    "create", "update", "delete", "remove", "apply", "write", "edit", "run", "execute", "exec",
    "set", "put", "post", "patch", "insert", "upsert", "drop", "deploy", "destroy", "rollback",
    "rollout", "restart", "scale", "start", "stop", "kill", "terminate", "cancel", "refund",
    "charge", "capture", "send", "publish", "push", "commit", "merge", "rebase", "reset", "revert",
    "upload", "move", "rename", "copy", "install", "uninstall", "migrate", "upgrade", "downgrade",
    "add", "replace", "modify", "save", "store", "submit", "approve", "reject", "close", "open_pr",
    "assign", "grant", "revoke", "lock", "unlock", "acquire", "release", "complete", "abort",
    "initiate", "begin", "invoke", "trigger", "enable", "disable", "attach", "detach", "tag",
    "untag", "import", "transfer", "pay", "void", "finalize", "confirm", "reserve", "claim",
    "multiedit", "notebookedit", "str_replace", "todowrite", "todo_write", "make", "generate", "build",
    "login", "signin", "authenticate", "issue", "mint", "grant", "renew", "receive", "dispatch",
)
#: Every state-changing verb: the list above, then the creation and modification verbs
#: (those that are not read verbs too: ``open`` a file, ``export`` a report read).
WRITE_VERBS = _WRITE_VERBS + tuple(
    sorted((CREATE_VERBS | MODIFY_VERBS) - set(_WRITE_VERBS) - set(READ_VERBS) - {"export"})
)
