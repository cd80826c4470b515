"""Classify tool calls as read-only or mutating (pure functions, table driven).

Shell-like tools (``bash``, ``shell``, ``run_shell``, ``execute_command``, ``exec``,
``terminal``, ``run_terminal_cmd``, ``local_shell``, ``Bash`` …) are classified by their
command line: it is split into segments on ``|``, ``&&``, ``||``, ``;`` and newlines, and
each segment by its program and sub-command (``git log`` read-only, ``git reset``
mutating, ``aws … describe-*`` read-only, ``psql -c "UPDATE …"`` mutating …). A chain is
mutating if any segment mutates, read-only if every segment is read-only (or neutral:
``cd``, ``echo`` …), unknown otherwise. Output redirection to a file mutates.

Other tools are classified by the verb of their name (``get_``/``list_``/``read_``/
``search_``/``view`` read-only; ``create_``/``update_``/``delete_``/``apply_``/``write_``/
``edit_``/``run_``/``execute_`` mutating), refined by their arguments (an SQL statement, an
HTTP method, an editor sub-command).

Each classification also names the resource *domains* touched (``git``, ``k8s``,
``terraform``, ``db``, ``aws:s3``, ``stripe``, ``kafka``, ``fs`` …) for the
read-before-write rule. ``mutating`` is ``None`` when unknown.

This module holds the tool-name side and the entry points; a command line is split and
judged in :mod:`.shell`, one program's words in :mod:`.programs`.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from .callkinds import (
    APPEND_VERBS,
    READ_VERBS,
    WRITE_VERBS,
    CallClass,
    code_verb,
    name_words,
    phrasal_verb,
)
from .programs import (
    GRAPHQL_OP,
    SQL_MUT_RE,
    SQL_RO_RE,
    posts_a_read,
    sql_text_class,
    writes_in_body,
)
from .shell import classify_chain, file_domain, split_segments

__all__ = [
    "SHELL_TOOLS",
    "CallClass",
    "classify_call",
    "classify_command",
    "command_of",
    "is_shell_tool",
    "split_segments",
]


SHELL_TOOLS: frozenset[str] = frozenset(
    {
        "bash", "shell", "sh", "zsh", "run_shell", "run_shell_command", "shell_command",
        "execute_command", "execute_bash", "exec", "exec_command", "terminal",
        "run_terminal_cmd", "run_terminal_command", "run_command", "local_shell",
        "local_shell_call", "container.exec", "cmd", "command", "powershell", "run_in_terminal",
        "bash_tool", "shell_exec", "execute_shell", "terminal_exec", "run_bash", "bashtool",
        "developer__shell", "execute",
    }
)


def _base_tool_name(name: str) -> str:
    n = name.strip()
    if "__" in n:  # mcp__server__tool, developer__shell
        n = n.rsplit("__", 1)[-1]
    return n


def is_shell_tool(name: str | None) -> bool:
    """Whether ``name`` denotes a shell-like tool whose arguments carry a command line."""
    if not name:
        return False
    low = name.lower()
    return low in SHELL_TOOLS or _base_tool_name(low) in SHELL_TOOLS


_COMMAND_KEYS = ("command", "cmd", "commands", "script", "command_line", "commandLine", "code", "input", "args")


def _command_from_value(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
        # ["bash", "-lc", "git log"] -> "git log"
        words: list[str] = list(v)
        if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and words[1] in ("-c", "-lc", "-ic", "-l"):
            return words[-1]
        return shlex.join(words)
    if isinstance(v, Mapping):
        return _command_from_mapping(v)
    return None


def _command_from_mapping(obj: Mapping[str, Any]) -> str | None:
    for k in _COMMAND_KEYS:
        if k in obj:
            c = _command_from_value(obj[k])
            if c:
                return c
    act = obj.get("action")
    if isinstance(act, Mapping):
        return _command_from_mapping(act)
    return None


def command_of(tool_name: str | None, arguments: str) -> str | None:
    """The command line of a shell-like tool call (``arguments`` is the call's argument
    text, usually JSON), or ``None`` for other tools."""
    if not is_shell_tool(tool_name):
        return None
    text = arguments.strip()
    if text.startswith(("{", "[")):
        try:
            obj = json.loads(text)
        except ValueError:
            return text or None
        if isinstance(obj, Mapping):
            return _command_from_mapping(obj)
        return _command_from_value(obj)
    return text or None


_NAMED_TOOLS: Mapping[str, bool] = {
    "read": False, "glob": False, "grep": False, "ls": False, "webfetch": False, "websearch": False,
    "web_search": False, "web_fetch": False, "todoread": False, "notebookread": False, "task": False,
    "think": False, "view": False, "read_file": False, "list_files": False, "search_files": False,
    "list_code_definition_names": False, "codebase_search": False, "file_search": False,
    "grep_search": False, "list_dir": False, "ask_followup_question": False,
    "write": True, "edit": True, "multiedit": True, "notebookedit": True, "todowrite": True,
    "apply_patch": True, "write_to_file": True, "replace_in_file": True, "edit_file": True,
    "create_file": True, "delete_file": True, "insert_edit_into_file": True, "search_replace": True,
    "reapply": True, "str_replace_based_edit_tool": True,
}
_EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "text_editor", "developer__text_editor", "editor"})
_EDITOR_RO_CMDS = frozenset({"view", "read", "list", "show"})
_PATH_KEYS = ("path", "file_path", "filePath", "filepath", "file", "filename", "target_file", "notebook_path", "absolute_path", "relative_path")

_DOMAIN_WORDS: tuple[tuple[str, str], ...] = (
    ("git", "git"), ("github", "git"), ("commit", "git"), ("branch", "git"),
    ("kube", "k8s"), ("k8s", "k8s"), ("deployment", "k8s"), ("pod", "k8s"), ("helm", "k8s"),
    ("terraform", "terraform"), ("tf", "terraform"),
    ("sql", "db"), ("postgres", "db"), ("mysql", "db"), ("database", "db"), ("db", "db"),
    ("migration", "db"), ("alembic", "db"), ("flyway", "db"), ("table", "db"), ("query", "db"),
    ("s3", "aws:s3"), ("multipart", "aws:s3"), ("bucket", "aws:s3"), ("upload", "aws:s3"),
    ("ec2", "aws:ec2"), ("instance", "aws:ec2"),
    ("stripe", "stripe"), ("refund", "stripe"), ("payment", "stripe"), ("charge", "stripe"),
    ("invoice", "stripe"), ("customer", "stripe"),
    ("kafka", "kafka"), ("consumer", "kafka"), ("offset", "kafka"), ("topic", "kafka"),
    ("file", "fs"), ("dir", "fs"), ("directory", "fs"),
)

@lru_cache(maxsize=4096)
def classify_command(command: str) -> CallClass:
    """Classify a shell command line (see module docstring). Never raises. Memoised
    (pure, and a history's commands are classified again on every lossy request)."""
    try:
        return classify_chain(command)
    except Exception:  # pragma: no cover - defensive: classification must never break extraction
        return CallClass(None, command, frozenset(), "unparseable")


def _name_domains(words: Iterable[str]) -> frozenset[str]:
    out = set()
    ws = list(words)
    for w in ws:
        for key, dom in _DOMAIN_WORDS:
            if w == key or (len(key) > 3 and w.startswith(key)):
                out.add(dom)
    return frozenset(out)


def _args_obj(arguments: str) -> Mapping[str, Any]:
    try:
        obj = json.loads(arguments) if arguments.strip().startswith("{") else None
    except ValueError:
        return {}
    return obj if isinstance(obj, Mapping) else {}


def _noun_domain(words: list[str]) -> str | None:
    nouns = [w for w in words if w not in READ_VERBS and w not in WRITE_VERBS and len(w) > 2]
    if not nouns:
        return None
    n = nouns[-1]
    return "tool:" + (n[:-1] if n.endswith("s") and not n.endswith("ss") else n)


_CODE_KEYS = ("code", "script", "source", "cell", "python", "js", "javascript", "expression")
def _appending(domains: Iterable[str], adds: bool) -> frozenset[str]:
    """The domains of a change; one that only adds (an append verb, an ``INSERT``) touches
    them additively (as ``git commit`` does ``git:additive``): it links to no read before it."""
    return frozenset(f"{d}:additive" for d in domains) if adds else frozenset(domains)


#: Words of a tool's name that say it wraps a program, not which one.
_WRAPPER_WORDS = frozenset({"cli", "tool", "run", "exec", "execute", "command", "cmd", "mcp", "wrapper", "invoke", "call"})


def _wrapped_command(words: list[str], cmd: str) -> CallClass | None:
    """The class of a CLI-wrapping tool's command: ``{"command": "get pods"}`` on a tool
    named ``kubectl`` (or ``aws_cli``, ``run_kubectl``) runs ``kubectl get pods`` — if
    the shell classifier knows that program's words; a tool named only for running
    (``run``) runs its command as a command line."""
    first = cmd.split()[0].rsplit("/", 1)[-1]
    for w in words:
        if w in _WRAPPER_WORDS:
            continue
        c = classify_command(cmd if first == w else f"{w} {cmd}")
        if c.mutating is not None:
            return c
    if words and all(w in _WRAPPER_WORDS for w in words):
        # named only for running (``run``, ``exec_tool``): its command is a command line
        c = classify_command(cmd)
        return c if c.mutating is not None else None
    return None


def classify_call(tool_name: str | None, arguments: str = "") -> CallClass:
    """Classify a tool call from its name and its argument text (JSON or raw)."""
    name = tool_name or ""
    if is_shell_tool(name):
        cmd = command_of(name, arguments)
        if not cmd:
            return CallClass(None, None, frozenset(), f"{name}: no command")
        return classify_command(cmd)
    base = _base_tool_name(name)
    low = base.lower()
    args = _args_obj(arguments)
    words = name_words(base)
    domains = set(_name_domains(words))
    nd = _noun_domain(words)
    if nd:
        domains.add(nd)
    for k in _PATH_KEYS:
        v = args.get(k)
        if isinstance(v, str) and v and "://" not in v:
            domains.add(file_domain(v))
    # editor-style tools: the sub-command decides
    if low in _EDITOR_TOOLS or name.lower() in _EDITOR_TOOLS:
        sub = str(args.get("command", args.get("action", ""))).lower()
        fdom = frozenset({"fs"} | {d for d in domains if d.startswith("file:")})
        if sub in _EDITOR_RO_CMDS:
            return CallClass(False, None, fdom, f"{base} {sub}")
        return CallClass(True, None, fdom, f"{base} {sub}".strip())
    # SQL-carrying tools
    for k in ("sql", "query", "statement", "stmt"):
        v = args.get(k)
        if isinstance(v, str) and (SQL_MUT_RE.search(v) or SQL_RO_RE.search(v)):
            seg = sql_text_class(v, base)
            return CallClass(seg.mutating, None, _appending(domains | {"db"}, "db:additive" in seg.domains), seg.reason)
    # GraphQL-carrying tools: an operation is a mutation or a query
    for k in ("query", "document", "graphql", "operation"):
        v = args.get(k)
        if isinstance(v, str):
            op = GRAPHQL_OP.match(v)
            # a bare selection set ``{ … }`` is GraphQL only on a tool that says so (a
            # Mongo filter is written the same way)
            if op and (op.group(1) or "graphql" in words or k in ("graphql", "document")):
                mutation = op.group(1) == "mutation"
                return CallClass(mutation, None, frozenset(domains | {"graphql"}), f"{base} GraphQL {'mutation' if mutation else 'query'}")
    # HTTP-carrying tools
    method = args.get("method")
    if isinstance(method, str) and method.upper() in ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"):
        target = next((v for k in ("path", "url", "endpoint", "uri") if isinstance(v := args.get(k), str)), "")
        ro = method.upper() in ("GET", "HEAD", "OPTIONS") or (method.upper() == "POST" and posts_a_read(target) and not writes_in_body(arguments))
        return CallClass(not ro, None, frozenset(domains | {"http"}), f"{base} {method.upper()}")
    # code-running tools: {"code": "mlflow.get_run(…)"}, {"script": "db.x.insertOne(…)"}
    for k in _CODE_KEYS:
        v = args.get(k)
        if isinstance(v, str) and "(" in v:
            verb = code_verb(v)
            if verb is not None:
                return CallClass(verb != "read", None, _appending(domains, verb in APPEND_VERBS), f"{base} code ({verb})")
    # a nested command for CLI-wrapping tools: {"command": "get pods"} on a tool named kubectl
    # (or named after one: {"command": "kms create-key …"} on ``aws_cli``, ``run_kubectl``)
    cmd = args.get("command") or args.get("args")
    if isinstance(cmd, str) and cmd.strip():
        wrapped = _wrapped_command(words or [low], cmd.strip())
        if wrapped is not None:
            return wrapped
    if low in _NAMED_TOOLS:
        mut = _NAMED_TOOLS[low]
        return CallClass(mut, None, frozenset(domains | {"fs"} if low not in ("websearch", "webfetch", "web_search", "web_fetch", "task", "think", "ask_followup_question") else domains), f"tool {base}")
    if words:
        first = words[0]
        if "_".join(words[:2]) in _NAMED_TOOLS:
            mut = _NAMED_TOOLS["_".join(words[:2])]
            return CallClass(mut, None, frozenset(domains), f"tool {base}")
        phrasal = phrasal_verb(words)
        if phrasal is not None:
            return CallClass(phrasal != "read", None, frozenset(domains), f"phrasal verb ({phrasal})")
        if first in ("dry", "preview", "plan") or args.get("dry_run") is True or args.get("dryRun") is True:
            return CallClass(False, None, frozenset(domains), f"{base} (dry run)")
        if first in READ_VERBS:
            return CallClass(False, None, frozenset(domains), f"verb {first}_")
        if first in WRITE_VERBS:
            return CallClass(True, None, _appending(domains, first in APPEND_VERBS), f"verb {first}_")
        # verb last: "refund_create", "deployment_rollback"
        last = words[-1]
        if last in WRITE_VERBS and last not in ("log", "test"):
            return CallClass(True, None, frozenset(domains), f"verb _{last}")
        if last in READ_VERBS:
            return CallClass(False, None, frozenset(domains), f"verb _{last}")
        # a verb in the middle: "payments_create_intent", "dns_list_records"
        mids = words[1:-1]
        for w in mids:
            if w in WRITE_VERBS and w not in ("log", "test"):
                return CallClass(True, None, frozenset(domains), f"verb _{w}_")
        for w in mids:
            if w in READ_VERBS:
                return CallClass(False, None, frozenset(domains), f"verb _{w}_")
        # an action argument: {"action": "create_refund"}
        act = args.get("action") or args.get("operation") or args.get("op")
        if isinstance(act, str):
            inner = classify_call(act, "")
            if inner.mutating is not None:
                return CallClass(inner.mutating, None, frozenset(domains | inner.domains), f"{base} action {act}")
    return CallClass(None, None, frozenset(domains), f"tool {base}: unknown")
