"""What a tool call's classification says (:class:`CallClass`) and the verbs that decide
it, shared by tool names (:mod:`.commands`) and command lines (:mod:`.shell`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["READ_VERBS", "WRITE_VERBS", "CallClass"]


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
WRITE_VERBS = (
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
