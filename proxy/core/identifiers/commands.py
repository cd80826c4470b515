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
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "SHELL_TOOLS",
    "CallClass",
    "classify_call",
    "classify_command",
    "command_of",
    "is_shell_tool",
    "split_segments",
]


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


# --------------------------------------------------------------------------- shell parsing

_SPLIT_OPS = frozenset({"|", "||", "&&", ";", "&", "\n", "|&", ";;"})


def split_segments(command: str) -> list[list[str]]:
    """Split a command line into simple commands (lists of words), honouring quotes.
    Redirections stay in the word list (``>``, ``>>``, ``2>&1``). Never raises."""
    segments: list[list[str]] = []
    for line in command.replace("\r", "").split("\n"):
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
            lex.whitespace_split = True
            lex.commenters = "#"
            words = list(lex)
        except ValueError:
            words = re.split(r"\s+", line.strip())
            # crude: make operators separate words
            words = [w for part in words for w in re.split(r"(\|\||&&|[|;])", part) if w]
        cur: list[str] = []
        for w in words:
            if w in _SPLIT_OPS:
                if cur:
                    segments.append(cur)
                cur = []
            else:
                cur.append(w)
        if cur:
            segments.append(cur)
    return segments


# Programs that never change anything the agent could later need back.
_READ_ONLY_PROGRAMS = frozenset(
    """ls ll la dir cat head tail less more grep egrep fgrep rg ag ack fd tree wc stat file du df pwd
    echo printf which whereis type whoami id env printenv date uname hostname sort uniq cut tr
    column nl diff cmp md5sum sha1sum sha256sum sha512sum shasum cksum readlink realpath basename
    dirname xxd od hexdump strings ps top htop free uptime netstat ss lsof dig nslookup host ping
    traceroute true false test [ [[ sleep cd pushd popd export set unset source . alias history
    man help jq yq bat exa eza tldr lsblk mount findmnt nproc lscpu arch locale whatis apropos
    pytest py.test mypy ruff flake8 pylint pyright black isort tox nox eslint tsc jest vitest
    mocha shellcheck hadolint tflint kubeval kubeconform yamllint hostnamectl timedatectl getent
    base64 openssl gpg nvidia-smi vmstat iostat watch tput clear reset-terminal wait read""".split()
)
_NEUTRAL_WRAPPERS = frozenset({"sudo", "time", "nohup", "nice", "ionice", "command", "builtin", "exec", "stdbuf", "unbuffer"})
_MUTATING_PROGRAMS = frozenset(
    """rm rmdir mv cp mkdir touch chmod chown chgrp ln dd truncate tee install rsync scp shred
    patch kill pkill killall shutdown reboot halt useradd userdel usermod groupadd passwd
    mkfs fdisk parted umount zip gzip gunzip bzip2 xz 7z sftp""".split()
)

_GIT_RO = frozenset(
    """log show status rev-parse diff blame ls-files ls-tree ls-remote cat-file describe shortlog
    grep merge-base rev-list name-rev show-ref for-each-ref fetch version help whatchanged
    show-branch count-objects fsck verify-commit verify-tag var check-ignore check-attr
    range-diff cherry difftool annotate""".split()
)
_GIT_MUT = frozenset(
    """reset commit push rebase checkout switch restore merge cherry-pick revert pull am apply
    add rm mv clean init clone gc prune update-ref filter-branch filter-repo replace
    update-index write-tree commit-tree mktag read-tree symbolic-ref""".split()
)
#: Mutations that only add (commits, refs, objects): values read before stay valid, so
#: they get the domain ``git:additive`` and do not trigger read-before-write.
_GIT_ADDITIVE = frozenset({"add", "commit", "push", "pull", "clone", "init", "gc", "revert", "cherry-pick", "am", "merge"})
_GIT_REWRITE_FLAGS = frozenset({"--amend", "-f", "--force", "--force-with-lease", "--delete", "-d", "--mirror", "--prune", "--ff-only", "--rebase", "-r"})
_GIT_OPTS_WITH_ARG = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})

_KUBECTL_RO = frozenset(
    """get describe logs log top explain api-resources api-versions version cluster-info diff
    events wait port-forward proxy auth completion kustomize plugin""".split()
)
_KUBECTL_MUT = frozenset(
    """apply create delete set scale patch edit replace label annotate expose run autoscale
    cordon drain taint uncordon cp certificate attach debug""".split()
)
_HELM_RO = frozenset({"list", "ls", "status", "get", "history", "template", "show", "search", "lint", "version", "env", "diff", "verify"})
_HELM_MUT = frozenset({"install", "upgrade", "rollback", "uninstall", "delete", "del", "push", "create"})

_TF_RO = frozenset({"plan", "show", "output", "validate", "version", "providers", "graph", "console", "init", "get", "login", "test"})
_TF_MUT = frozenset({"apply", "destroy", "import", "refresh", "taint", "untaint", "force-unlock"})

_ALEMBIC_RO = frozenset({"current", "history", "heads", "branches", "show", "check", "list_templates"})
_ALEMBIC_MUT = frozenset({"upgrade", "downgrade", "stamp", "revision", "merge", "init", "edit"})
_FLYWAY_RO = frozenset({"info", "validate", "check", "version", "help"})
_FLYWAY_MUT = frozenset({"migrate", "clean", "baseline", "repair", "undo"})
_DJANGO_RO = frozenset({"showmigrations", "sqlmigrate", "check", "inspectdb", "diffsettings", "dbshell-readonly", "help", "version", "test", "dumpdata", "runserver"})
_DJANGO_MUT = frozenset({"migrate", "makemigrations", "squashmigrations", "flush", "loaddata", "createsuperuser", "changepassword", "collectstatic", "shell", "dbshell", "startapp", "sqlflush"})

_SQL_MUT_RE = re.compile(
    r"\b(?:insert\s+into|update\s+\w[\w.\"]*\s+set|delete\s+from|create\s+(?:table|index|unique|database|schema|role|user|view|extension|sequence|function|trigger|type|materialized)|"
    r"drop\s+\w+|alter\s+\w+|truncate\b|grant\b|revoke\b|merge\s+into|upsert\b|copy\s+\S+\s+from|vacuum\b|reindex\b|cluster\b|"
    r"pg_terminate_backend|pg_drop_replication_slot|pg_create_\w+|set\s+(?:global|persist)|reset\s+master|purge\s+binary|"
    r"change\s+(?:master|replication)|start\s+(?:slave|replica)|stop\s+(?:slave|replica)|call\s+\w+|do\s+\$\$|begin\b[\s\S]*?\bcommit\b)",
    re.I,
)
_SQL_RO_RE = re.compile(r"(?:\bselect\b|\bshow\b|\bexplain\b|\bdescribe\b|\\d\w*|\\l\b|\\dt|\bwith\b[\s\S]+\bselect\b)", re.I)

_AWS_RO_OPS = re.compile(r"^(?:describe|list|get|head|wait|batch-get|lookup|search|scan|query|filter|select|estimate|preview|test|validate|check)\b")
_AWS_S3_RO = frozenset({"ls", "presign"})

_READ_VERBS = (
    "get", "list", "read", "search", "view", "show", "describe", "find", "fetch", "query", "lookup",
    "look", "inspect", "check", "status", "grep", "glob", "ls", "cat", "head", "tail", "browse",
    "open", "retrieve", "count", "explain", "diff", "watch", "peek", "preview", "stat", "download",
    "summarize", "analyze", "validate", "info", "is", "has", "can", "print", "web", "lint", "test",
    "plan", "dry", "estimate", "recall", "history", "log", "logs", "ask", "think", "todo_read", "todoread",
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

_WORD_SPLIT = re.compile(r"[_\-.\s/]+|(?<=[a-z])(?=[A-Z])")


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD_SPLIT.split(name) if w]


# --------------------------------------------------------------------------- segment rules


@dataclass(frozen=True, slots=True)
class _Seg:
    mutating: bool | None
    domains: frozenset[str]
    reason: str


def _ro(reason: str, *domains: str) -> _Seg:
    return _Seg(False, frozenset(domains), reason)


def _mut(reason: str, *domains: str) -> _Seg:
    return _Seg(True, frozenset(domains), reason)


def _unknown(reason: str, *domains: str) -> _Seg:
    return _Seg(None, frozenset(domains), reason)


def _positional(args: list[str], opts_with_arg: frozenset[str] = frozenset()) -> list[str]:
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in opts_with_arg:
            skip = True
            continue
        if a.startswith("-"):
            continue
        out.append(a)
    return out


def _git(args: list[str]) -> _Seg:
    pos = _positional(args, _GIT_OPTS_WITH_ARG)
    if not pos:
        return _ro("git", "git")
    sub, rest = pos[0], args[args.index(pos[0]) + 1 :]
    rest_pos = _positional(rest)
    if sub in _GIT_RO:
        return _ro(f"git {sub}", "git")
    if sub in _GIT_ADDITIVE and not (set(rest) & _GIT_REWRITE_FLAGS):
        # adds history without moving or discarding what was read before
        return _mut(f"git {sub}", "git:additive")
    if sub in _GIT_MUT:
        return _mut(f"git {sub}", "git")
    if sub == "branch":
        if any(a in ("-d", "-D", "-m", "-M", "-f", "--delete", "--move", "--force", "-c", "-C", "--set-upstream-to", "-u") for a in rest):
            return _mut("git branch (modify)", "git")
        listing = any(a in ("-a", "-r", "-l", "--list", "-v", "-vv", "--show-current", "--contains", "--merged", "--no-merged") for a in rest)
        return _ro("git branch (list)", "git") if listing or not rest_pos else _mut("git branch (create)", "git:additive")
    if sub == "tag":
        if any(a in ("-d", "--delete", "-a", "-s", "-f") for a in rest):
            return _mut("git tag (modify)", "git")
        return _ro("git tag (list)", "git") if not rest_pos or "-l" in rest or "--list" in rest else _mut("git tag (create)", "git:additive")
    if sub == "stash":
        return _ro("git stash list", "git") if rest_pos[:1] in (["list"], ["show"]) else _mut("git stash", "git")
    if sub == "remote":
        return _mut("git remote (modify)", "git") if rest_pos[:1] and rest_pos[0] in ("add", "remove", "rm", "rename", "set-url", "prune") else _ro("git remote", "git")
    if sub == "config":
        return _ro("git config (read)", "git") if any(a.startswith(("--get", "--list", "-l")) for a in rest) or len(rest_pos) <= 1 else _mut("git config (set)", "git")
    if sub == "reflog":
        return _mut("git reflog expire", "git") if rest_pos[:1] and rest_pos[0] in ("expire", "delete") else _ro("git reflog", "git")
    if sub == "worktree":
        return _ro("git worktree list", "git") if rest_pos[:1] == ["list"] else _mut("git worktree", "git")
    if sub == "submodule":
        return _ro("git submodule status", "git") if not rest_pos or rest_pos[0] in ("status", "summary", "foreach") else _mut("git submodule", "git")
    if sub == "notes":
        return _ro("git notes", "git") if not rest_pos or rest_pos[0] in ("list", "show") else _mut("git notes", "git")
    if sub == "bisect":
        return _ro("git bisect log", "git") if rest_pos[:1] in (["log"], ["visualize"], ["view"]) else _mut("git bisect", "git")
    return _unknown(f"git {sub}", "git")


def _kubectl(args: list[str], prog: str) -> _Seg:
    pos = _positional(args, frozenset({"-n", "--namespace", "--context", "--kubeconfig", "-l", "--selector", "-o", "--output", "-c", "--container", "-f", "--filename"}))
    if not pos:
        return _ro(prog, "k8s")
    sub = pos[0]
    if sub == "rollout":
        action = pos[1] if len(pos) > 1 else ""
        return _ro(f"{prog} rollout {action}", "k8s") if action in ("status", "history") else _mut(f"{prog} rollout {action}".strip(), "k8s")
    if sub == "config":
        action = pos[1] if len(pos) > 1 else ""
        return _ro(f"{prog} config {action}", "k8s") if action in ("view", "get-contexts", "current-context", "get-clusters", "get-users") else _mut(f"{prog} config {action}", "k8s")
    if sub == "exec":
        if "--" in args:
            inner = args[args.index("--") + 1 :]
            seg = _classify_words(inner)
            return _Seg(seg.mutating, seg.domains | {"k8s"}, f"{prog} exec: {seg.reason}")
        return _unknown(f"{prog} exec", "k8s")
    if sub in _KUBECTL_RO:
        return _ro(f"{prog} {sub}", "k8s")
    if sub in _KUBECTL_MUT:
        return _mut(f"{prog} {sub}", "k8s")
    return _unknown(f"{prog} {sub}", "k8s")


def _helm(args: list[str]) -> _Seg:
    pos = _positional(args, frozenset({"-n", "--namespace", "-f", "--values", "--set", "--version", "--kube-context"}))
    sub = pos[0] if pos else ""
    if sub == "repo":
        return _ro("helm repo list", "k8s") if pos[1:2] == ["list"] else _mut("helm repo", "k8s")
    if sub in _HELM_RO:
        return _ro(f"helm {sub}", "k8s")
    if sub in _HELM_MUT:
        return _mut(f"helm {sub}", "k8s")
    return _unknown(f"helm {sub}", "k8s")


def _terraform(args: list[str], prog: str) -> _Seg:
    pos = _positional([a for a in args if not a.startswith("-chdir")])
    sub = pos[0] if pos else ""
    if sub == "state":
        action = pos[1] if len(pos) > 1 else ""
        return _ro(f"{prog} state {action}", "terraform") if action in ("list", "show", "pull") else _mut(f"{prog} state {action}", "terraform")
    if sub == "workspace":
        action = pos[1] if len(pos) > 1 else ""
        return _ro(f"{prog} workspace {action}", "terraform") if action in ("list", "show") else _mut(f"{prog} workspace {action}", "terraform")
    if sub == "fmt":
        return _ro(f"{prog} fmt -check", "terraform") if "-check" in args or "--check" in args else _mut(f"{prog} fmt", "terraform", "fs")
    if sub in _TF_RO:
        return _ro(f"{prog} {sub}", "terraform")
    if sub in _TF_MUT:
        return _mut(f"{prog} {sub}", "terraform")
    return _unknown(f"{prog} {sub}", "terraform")


def _sql_text_class(text: str, reason: str) -> _Seg:
    if _SQL_MUT_RE.search(text):
        return _mut(f"{reason} (write SQL)", "db")
    if _SQL_RO_RE.search(text):
        return _ro(f"{reason} (read SQL)", "db")
    return _unknown(reason, "db")


def _sql_client(args: list[str], prog: str, raw: str) -> _Seg:
    sql_parts: list[str] = []
    for i, a in enumerate(args):
        if a in ("-c", "--command", "-e", "--execute") and i + 1 < len(args):
            sql_parts.append(args[i + 1])
        elif a.startswith(("--command=", "--execute=")):
            sql_parts.append(a.split("=", 1)[1])
    if prog == "sqlite3":
        pos = _positional(args)
        sql_parts.extend(pos[1:])
    if sql_parts:
        return _sql_text_class(" ".join(sql_parts), prog)
    # heredoc / piped SQL: classify the raw segment text
    return _sql_text_class(raw, prog) if ("<<" in raw or "SELECT" in raw.upper()) else _unknown(prog, "db")


def _aws(args: list[str]) -> _Seg:
    pos = _positional(args, frozenset({"--region", "--profile", "--output", "--query", "--endpoint-url", "--bucket", "--key", "--upload-id", "--cli-input-json"}))
    if len(pos) < 1:
        return _unknown("aws")
    service = pos[0]
    domain = "aws:s3" if service in ("s3", "s3api") else f"aws:{service}"
    op = pos[1] if len(pos) > 1 else ""
    if service == "s3":
        if op in _AWS_S3_RO:
            return _ro(f"aws s3 {op}", domain)
        return _mut(f"aws s3 {op}", domain)
    if service == "configure":
        return _ro("aws configure list", "aws") if op in ("list", "get", "list-profiles") else _mut("aws configure", "aws")
    if service == "sts":
        return _ro(f"aws sts {op}", domain)
    if _AWS_RO_OPS.match(op):
        return _ro(f"aws {service} {op}", domain)
    if op:
        return _mut(f"aws {service} {op}", domain)
    return _unknown(f"aws {service}", domain)


def _cloud_cli(args: list[str], prog: str) -> _Seg:
    pos = _positional(args)
    for w in pos:
        if w in ("list", "describe", "show", "get", "get-iam-policy", "read", "info", "logs", "tail", "versions"):
            return _ro(f"{prog} … {w}", prog)
        if w in ("create", "delete", "update", "deploy", "set", "add", "remove", "start", "stop", "restart", "apply", "import", "resize", "rollback", "cancel", "submit"):
            return _mut(f"{prog} … {w}", prog)
    return _unknown(prog, prog)


def _stripe(args: list[str]) -> _Seg:
    pos = _positional(args, frozenset({"-d", "--data", "--api-key", "--stripe-account", "-c"}))
    if not pos:
        return _unknown("stripe", "stripe")
    if pos[0] in ("get", "listen", "logs", "status", "version", "samples", "open", "config", "login", "help"):
        return _ro(f"stripe {pos[0]}", "stripe")
    if pos[0] in ("post", "delete", "trigger", "fixtures"):
        return _mut(f"stripe {pos[0]}", "stripe")
    op = pos[1] if len(pos) > 1 else ""
    if op in ("list", "retrieve", "search", "get", "upcoming", "list_line_items"):
        return _ro(f"stripe {pos[0]} {op}", "stripe")
    if op:
        return _mut(f"stripe {pos[0]} {op}", "stripe")
    return _unknown(f"stripe {pos[0]}", "stripe")


def _kafka(prog: str, args: list[str]) -> _Seg:
    flags = set(args)
    if "consumer-groups" in prog:
        if "--reset-offsets" in flags:
            return _ro(f"{prog} --reset-offsets --dry-run", "kafka") if "--dry-run" in flags and "--execute" not in flags else _mut(f"{prog} --reset-offsets", "kafka")
        if "--delete" in flags or "--delete-offsets" in flags:
            return _mut(f"{prog} --delete", "kafka")
        return _ro(f"{prog}", "kafka")
    if "topics" in prog or "configs" in prog or "acls" in prog:
        if flags & {"--create", "--delete", "--alter", "--add", "--remove"}:
            return _mut(prog, "kafka")
        return _ro(prog, "kafka")
    if "console-producer" in prog or "producer-perf" in prog or "delete-records" in prog or "reassign" in prog or "leader-election" in prog:
        return _mut(prog, "kafka")
    if prog in ("kcat", "kafkacat"):
        return _mut(prog, "kafka") if "-P" in flags else _ro(prog, "kafka")
    return _ro(prog, "kafka")


def _docker(args: list[str], prog: str) -> _Seg:
    pos = _positional(args)
    sub = pos[0] if pos else ""
    if sub in ("compose", "container", "image", "buildx", "manifest", "volume", "network", "system", "context") and len(pos) > 1:
        sub2 = pos[1]
        if sub2 in ("ps", "ls", "list", "logs", "inspect", "config", "images", "top", "version", "df", "imagetools", "history"):
            return _ro(f"{prog} {sub} {sub2}", "docker")
        return _mut(f"{prog} {sub} {sub2}", "docker")
    if sub in ("ps", "images", "inspect", "logs", "version", "info", "history", "search", "stats", "top", "diff", "port", "events", "pull", "login"):
        return _ro(f"{prog} {sub}", "docker")
    if sub == "exec":
        return _unknown(f"{prog} exec", "docker")
    return _mut(f"{prog} {sub}", "docker") if sub else _unknown(prog, "docker")


def _python(args: list[str], raw: str) -> _Seg:
    pos = _positional(args)
    if "-m" in args:
        mod = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
        rest = args[args.index("-m") + 2 :]
        if mod in ("pytest", "mypy", "pyflakes", "flake8", "pylint", "ruff", "unittest", "doctest", "pydoc", "json.tool", "timeit", "http.server", "pip_audit", "compileall", "black", "isort") and not (mod in ("black", "isort", "ruff") and "--check" not in rest and "check" not in rest):
            return _ro(f"python -m {mod}")
        if mod == "pip":
            return _pip(rest)
        if mod == "alembic":
            return _alembic(rest)
        if mod == "django":
            return _django(rest)
        return _unknown(f"python -m {mod}")
    if pos and pos[0].endswith("manage.py"):
        return _django(pos[1:] + [a for a in args if a.startswith("-")])
    return _unknown("python")


def _pip(args: list[str]) -> _Seg:
    pos = _positional(args)
    sub = pos[0] if pos else ""
    if sub in ("list", "show", "freeze", "check", "search", "index", "inspect", "debug", "config", "help", "download", "hash", "cache"):
        return _ro(f"pip {sub}", "pkg")
    return _mut(f"pip {sub}", "pkg") if sub else _unknown("pip")


def _by_subcommand(label: str, sub: str, read_only: frozenset[str], mutating: frozenset[str]) -> _Seg:
    """Classify a migration tool by its subcommand (all of them touch the ``db`` domain)."""
    name = f"{label} {sub}"
    if sub in read_only:
        return _ro(name, "db", "db:migrate")
    if sub in mutating:
        return _mut(name, "db", "db:migrate")
    return _unknown(name, "db", "db:migrate")


def _alembic(args: list[str]) -> _Seg:
    pos = _positional(args, frozenset({"-c", "--config", "-n", "--name", "-x"}))
    return _by_subcommand("alembic", pos[0] if pos else "", _ALEMBIC_RO, _ALEMBIC_MUT)


def _django(args: list[str]) -> _Seg:
    pos = _positional(args, frozenset({"--settings", "--database", "--pythonpath"}))
    return _by_subcommand("manage.py", pos[0] if pos else "", _DJANGO_RO, _DJANGO_MUT)


def _flyway(args: list[str]) -> _Seg:
    pos = [a for a in _positional(args) if "=" not in a]
    return _by_subcommand("flyway", pos[0] if pos else "", _FLYWAY_RO, _FLYWAY_MUT)


def _curl(args: list[str], prog: str) -> _Seg:
    method = None
    for i, a in enumerate(args):
        if a in ("-X", "--request") and i + 1 < len(args):
            method = args[i + 1].upper()
        elif a.startswith("-X") and len(a) > 2:
            method = a[2:].upper()
        elif a in ("-d", "--data", "--data-raw", "--data-binary", "--data-urlencode", "-F", "--form", "-T", "--upload-file", "--json"):
            method = method or "POST"
    if prog == "http" or prog == "https":  # httpie: http [METHOD] URL
        pos = _positional(args)
        if pos and pos[0].upper() in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"):
            method = pos[0].upper()
    if method in (None, "GET", "HEAD", "OPTIONS"):
        return _ro(f"{prog} {method or 'GET'}", "http")
    return _mut(f"{prog} {method}", "http")


def _sed_like(args: list[str], prog: str) -> _Seg:
    if any(a == "-i" or a.startswith("-i") or a == "--in-place" for a in args):
        return _mut(f"{prog} -i", "fs")
    return _ro(prog)


def _find(args: list[str]) -> _Seg:
    if any(a in ("-delete", "-exec", "-execdir", "-ok", "-fprint") for a in args):
        if "-exec" in args:
            inner = args[args.index("-exec") + 1 :]
            inner = inner[: inner.index(";")] if ";" in inner else inner
            seg = _classify_words([w for w in inner if w not in ("{}", "+", "\\;")])
            if seg.mutating is False:
                return _ro("find -exec (read)", "fs")
        return _mut("find -delete/-exec", "fs")
    return _ro("find")


def _tar_like(args: list[str], prog: str) -> _Seg:
    if prog == "tar":
        flags = "".join(a.lstrip("-") for a in args[:1]) + "".join(a for a in args if a.startswith("-"))
        if "t" in flags and "x" not in flags and "c" not in flags:
            return _ro("tar -t")
        return _mut("tar", "fs")
    if prog == "unzip":
        return _ro("unzip -l") if "-l" in args or "-t" in args else _mut("unzip", "fs")
    return _mut(prog, "fs")


def _pkg_manager(args: list[str], prog: str) -> _Seg:
    pos = _positional(args)
    sub = pos[0] if pos else ""
    if sub in ("test", "ls", "list", "view", "info", "outdated", "audit", "why", "search", "show", "check", "config", "help", "version", "--version", "bin", "root", "prefix", "doctor", "tree", "metadata", "clippy", "fmt-check", "vet", "lint", "env"):
        return _ro(f"{prog} {sub}")
    if sub in ("run", "exec", "x", "dlx", "build", "start", "dev", "serve"):
        script = pos[1] if len(pos) > 1 else ""
        if script in ("test", "lint", "check", "typecheck", "format:check"):
            return _ro(f"{prog} {sub} {script}")
        return _unknown(f"{prog} {sub} {script}".strip())
    return _mut(f"{prog} {sub}", "pkg") if sub else _unknown(prog)


def _make(args: list[str]) -> _Seg:
    pos = _positional(args)
    if pos and all(p in ("test", "check", "lint", "typecheck", "help", "fmt-check", "vet") for p in pos):
        return _ro("make " + " ".join(pos))
    return _unknown("make")


def _systemctl(args: list[str], prog: str) -> _Seg:
    pos = _positional(args)
    if pos and pos[0] in ("status", "show", "list-units", "list-unit-files", "is-active", "is-enabled", "cat", "list-timers"):
        return _ro(f"{prog} {pos[0]}")
    return _mut(f"{prog} {' '.join(pos[:1])}".strip())


def _crontab(args: list[str]) -> _Seg:
    return _ro("crontab -l") if "-l" in args else _mut("crontab")


def _has_write_redirect(words: list[str]) -> bool:
    for i, w in enumerate(words):
        if w in (">", ">>", ">|", "&>", "&>>"):
            target = words[i + 1] if i + 1 < len(words) else ""
            if target in ("/dev/null", "/dev/stderr", "/dev/stdout") or target.startswith("&"):
                continue
            # "2>&1" is lexed as "2", ">", "&", "1"
            if target == "" or target == "&":
                continue
            return True
    return False


_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_FILE_ARG = re.compile(r"^[\w.~/@+\-]*[\w\-]\.[A-Za-z0-9]{1,10}$|^[\w.~@+\-]*/[\w.~/@+\-]+$")
_FILE_PROGRAMS = frozenset(
    """cat head tail less more bat nl wc grep egrep fgrep rg ag ack sed gsed awk gawk perl jq yq
    cp mv rm tee touch truncate chmod chown ln install diff cmp stat file md5sum sha1sum
    sha256sum xxd od hexdump strings sort uniq cut tr vim vi nano emacs code patch shred
    readlink realpath dos2unix unix2dos""".split()
)


def file_domain(path: str) -> str:
    """The read-before-write domain of a file: ``file:<base name>`` (so ``./a/x.yaml`` and
    ``/repo/a/x.yaml`` link)."""
    return "file:" + path.rstrip("/").rsplit("/", 1)[-1]


def _file_domains(prog: str, args: list[str]) -> frozenset[str]:
    if prog not in _FILE_PROGRAMS:
        return frozenset()
    return frozenset(file_domain(a) for a in args if not a.startswith("-") and "://" not in a and _FILE_ARG.match(a))


def _redirect_targets(words: list[str]) -> frozenset[str]:
    out: set[str] = set()
    for i, w in enumerate(words):
        if w in (">", ">>", ">|", "&>", "&>>") and i + 1 < len(words):
            t = words[i + 1]
            if t and not t.startswith(("&", "/dev/")):
                out.add(file_domain(t))
    return frozenset(out)


#: Flags that say a command only looks (PRINCIPLES §3a) or acts (§2a), whatever the tool.
_RO_FLAGS = frozenset({"--dry-run", "--dryrun", "--what-if", "--whatif", "--noop", "--check", "--plan", "--diff", "--validate-only"})
_RW_FLAGS = frozenset({"--execute", "--apply", "--async", "--force", "--yes", "-y", "--confirm", "--commit", "--approve", "--auto-approve", "--no-dry-run"})
#: Read verbs that decide a command even after a noun that is also a verb (``gh run list``).
_STRICT_READ = frozenset(
    """get list ls describe show status view info inspect cat logs log history search query watch
    diff whoami version help lookup find fetch tail head read print explain check""".split()
)
_CLI_SPLIT = re.compile(r"[-_.:]+")
#: Flags whose value is code for an interpreter or a query language.
_CODE_FLAGS = frozenset({"--eval", "-e", "--command", "-c", "--execute", "--query", "-q", "--script"})


def _generic_cli(prog: str, args: list[str], seg: _Seg) -> _Seg:
    """A command no table knows, judged by what it says (PRINCIPLES §2, "a tool the gate has
    never heard of is judged by what its call and output say"): a dry-run or check flag
    reads; an ``--execute``/``--apply``/``--async``/``--force`` flag acts; otherwise the
    verbs among the program's name parts and its first positional words (``backup-put``,
    ``etcdctl lease grant``, ``flagctl set``, ``gh run list``) decide, a strict read verb
    winning over a noun that happens to be a verb. SQL text in an argument decides by the
    statement. ``None`` stays when nothing speaks."""
    flags = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    if flags & _RO_FLAGS:
        return _Seg(False, seg.domains, f"{seg.reason} (dry run)")
    for a in args:
        if not a.startswith("-") and " " in a.strip() and (_SQL_MUT_RE.search(a) or _SQL_RO_RE.match(a.strip())):
            sql = _sql_text_class(a, prog)
            return _Seg(sql.mutating, seg.domains | sql.domains, sql.reason)
    parts = [w.lower() for w in _CLI_SPLIT.split(prog) if w]
    words = parts if len(parts) > 1 else []  # a compound name speaks (backup-put, deploy.sh); make does not
    for i, a in enumerate(args):  # code passed to an interpreter: db.orders.updateOne(…)
        if a in _CODE_FLAGS and i + 1 < len(args):
            calls = re.findall(r"\.([a-z]+)[A-Z]?\w*\s*\(", args[i + 1])
            verbs = [c for c in calls if c in _WRITE_VERBS or c in _CLI_WRITE_VERBS or c in _STRICT_READ or c in _READ_VERBS]
            if any(v in _WRITE_VERBS or v in _CLI_WRITE_VERBS for v in verbs):
                return _Seg(True, seg.domains, f"{seg.reason} (code {verbs[0]})")
            if verbs:
                return _Seg(False, seg.domains, f"{seg.reason} (code {verbs[0]})")
    words += [w.lower() for a in _positional(args)[:3] for w in _CLI_SPLIT.split(a) if w and "/" not in a and "=" not in a]
    if any(w in _STRICT_READ for w in words):
        return _Seg(False, seg.domains, f"{seg.reason} (verb)")
    if flags & _RW_FLAGS:
        return _Seg(True, seg.domains, f"{seg.reason} (flag)")
    for w in words:
        if w in _WRITE_VERBS or w in _CLI_WRITE_VERBS:
            return _Seg(True, seg.domains, f"{seg.reason} (verb {w})")
        if w in _READ_VERBS:
            return _Seg(False, seg.domains, f"{seg.reason} (verb {w})")
    return seg


#: CLI verbs beyond the tool-name verbs (``restic backup``, ``etcdctl lease grant``).
_CLI_WRITE_VERBS = frozenset(
    """backup snapshot grant renew ack promote flip switch rotate issue register provision
    allocate enqueue receive deregister unregister restore failover cutover mint sign put""".split()
)


def _classify_words(words: list[str], raw: str = "") -> _Seg:
    """Classify one simple command given as words."""
    ws = [w for w in words]
    # strip env assignments and neutral wrappers (sudo, time, env X=1, timeout 10 …)
    while ws:
        w = ws[0]
        if _ENV_ASSIGN.match(w):
            ws = ws[1:]
        elif w in _NEUTRAL_WRAPPERS:
            ws = ws[1:]
            while ws and ws[0].startswith("-"):
                opt = ws[0]
                ws = ws[1:]
                if w == "sudo" and opt in ("-u", "-g", "-C", "-h", "-p", "-U", "-r", "-t", "-D") and ws:
                    ws = ws[1:]  # option argument
        elif w in ("env",) and len(ws) > 1 and (_ENV_ASSIGN.match(ws[1]) or ws[1].startswith("-")):
            ws = ws[1:]
        elif w in ("timeout", "watch") and len(ws) > 1:
            ws = ws[1:]
            while ws and (ws[0].startswith("-") or ws[0][:1].isdigit()):
                ws = ws[1:]
        elif w == "xargs":
            ws = ws[1:]
            while ws and ws[0].startswith("-"):
                ws = ws[1:]
        else:
            break
    if not ws:
        return _ro("empty")
    redirect = _has_write_redirect(ws)
    prog_path, args = ws[0], ws[1:]
    prog = prog_path.rsplit("/", 1)[-1]
    if prog in ("bash", "sh", "zsh", "dash") and len(args) >= 2 and args[0] in ("-c", "-lc", "-ic", "-ec", "-xc"):
        c = _classify_chain(args[1])
        return _Seg(c.mutating, c.domains, c.reason)
    seg = _dispatch(prog, args, raw or " ".join(ws))
    if seg.mutating is None:
        seg = _generic_cli(prog, args, seg)
    files = _file_domains(prog, args) if seg.domains <= {"fs"} else frozenset()
    if redirect:
        files |= _redirect_targets(ws)
    if redirect and seg.mutating is not True:
        return _Seg(True, seg.domains | {"fs"} | files, f"{seg.reason} > file")
    return _Seg(seg.mutating, seg.domains | files, seg.reason) if files else seg


def _dispatch(prog: str, args: list[str], raw: str) -> _Seg:
    if prog == "git":
        return _git(args)
    if prog in ("kubectl", "oc", "k", "kubecolor", "microk8s.kubectl"):
        return _kubectl(args, prog)
    if prog == "helm":
        return _helm(args)
    if prog in ("terraform", "tofu", "terragrunt"):
        return _terraform(args, prog)
    if prog == "alembic":
        return _alembic(args)
    if prog in ("flyway",):
        return _flyway(args)
    if prog in ("django-admin", "manage.py"):
        return _django(args)
    if prog in ("python", "python3", "python3.11", "python3.12", "python3.10", "py", "uv", "poetry", "pipenv"):
        if prog in ("uv", "poetry", "pipenv") and args[:1] == ["run"]:
            return _classify_words(args[1:], raw)
        if prog in ("uv", "poetry", "pipenv"):
            return _pkg_manager(args, prog)
        return _python(args, raw)
    if prog in ("psql", "mysql", "mariadb", "sqlite3", "sqlcmd", "cockroach", "clickhouse-client"):
        return _sql_client(args, prog, raw)
    if prog in ("pg_dump", "pg_dumpall", "mysqldump", "pg_isready", "pg_controldata", "pg_waldump"):
        return _ro(prog, "db")
    if prog in ("pg_restore", "createdb", "dropdb", "pg_ctl", "pg_resetwal"):
        return _mut(prog, "db")
    if prog == "aws":
        return _aws(args)
    if prog in ("gcloud", "gsutil", "az", "doctl", "flyctl", "fly", "heroku", "vercel"):
        return _cloud_cli(args, prog)
    if prog == "stripe":
        return _stripe(args)
    if prog.startswith("kafka-") or prog in ("kcat", "kafkacat"):
        return _kafka(prog.removesuffix(".sh"), args)
    if prog in ("docker", "podman", "nerdctl", "docker-compose"):
        return _docker(args, prog)
    if prog in ("crane", "skopeo", "regctl", "cosign"):
        pos = _positional(args)
        return _ro(f"{prog} {pos[0] if pos else ''}".strip(), "docker") if pos and pos[0] in ("digest", "inspect", "manifest", "ls", "config", "list-tags", "verify", "tree", "triangulate") else _mut(prog, "docker")
    if prog in ("pip", "pip3"):
        return _pip(args)
    if prog in ("npm", "yarn", "pnpm", "cargo", "go", "gradle", "mvn", "bundle", "gem", "composer", "bun", "deno", "dotnet"):
        return _pkg_manager(args, prog)
    if prog in ("rake", "rails", "bin/rails"):
        pos = _positional(args)
        if pos and any(p.startswith("db:") for p in pos):
            ro = all(p in ("db:migrate:status", "db:version", "db:schema:dump") for p in pos if p.startswith("db:"))
            return _ro(f"{prog} db status", "db", "db:migrate") if ro else _mut(f"{prog} {pos[0]}", "db", "db:migrate")
        return _unknown(prog)
    if prog in ("prisma", "knex", "sequelize", "goose", "migrate", "dbmate", "atlas", "liquibase", "sqitch"):
        joined = " ".join(args)
        if re.search(r"\b(status|info|history|validate|version|diff|inspect|list|log|verify|lint)\b", joined) and not re.search(r"\b(deploy|up|latest|migrate:latest|dev|reset|apply|update|rollback|down|push|redo|revert)\b", joined):
            return _ro(f"{prog} status", "db", "db:migrate")
        return _mut(f"{prog} {joined}".strip(), "db", "db:migrate")
    if prog in ("curl", "wget", "http", "https", "xh"):
        if prog == "wget":
            return _ro("wget") if "--spider" in args or "-O-" in args or "-qO-" in args else _mut("wget", "fs")
        return _curl(args, prog)
    if prog in ("sed", "perl", "yq", "gsed"):
        return _sed_like(args, prog)
    if prog == "awk" or prog == "gawk":
        return _mut("awk -i inplace", "fs") if "inplace" in " ".join(args) else _ro("awk")
    if prog == "find":
        return _find(args)
    if prog in ("tar", "unzip"):
        return _tar_like(args, prog)
    if prog == "make":
        return _make(args)
    if prog in ("systemctl", "service", "launchctl"):
        return _systemctl(args, prog)
    if prog == "crontab":
        return _crontab(args)
    if prog in ("apt", "apt-get", "yum", "dnf", "brew", "apk", "snap", "pacman"):
        pos = _positional(args)
        if pos and pos[0] in ("list", "search", "show", "info", "policy", "depends", "rdepends", "madison"):
            return _ro(f"{prog} {pos[0]}", "pkg")
        return _mut(f"{prog} {' '.join(pos[:1])}".strip(), "pkg")
    if prog in ("black", "isort", "prettier", "gofmt", "rustfmt", "ruff"):
        joined = " ".join(args)
        if prog == "ruff" and args[:1] == ["check"] and "--fix" not in args:
            return _ro("ruff check")
        if "--check" in args or "--diff" in args or "-l" in args or "--list-different" in joined:
            return _ro(f"{prog} --check")
        if prog == "ruff" and args[:1] != ["format"]:
            return _ro("ruff")
        return _mut(prog, "fs")
    if prog in _READ_ONLY_PROGRAMS:
        return _ro(prog)
    if prog in _MUTATING_PROGRAMS:
        return _mut(prog, "fs")
    return _unknown(prog)


def _classify_chain(command: str) -> CallClass:
    segs = [_classify_words(ws, " ".join(ws)) for ws in split_segments(command)]
    if not segs:
        return CallClass(None, command, frozenset(), "empty command")
    domains: frozenset[str] = frozenset().union(*(s.domains for s in segs))
    muts = [s for s in segs if s.mutating is True]
    if muts:
        return CallClass(True, command, domains, "; ".join(s.reason for s in muts))
    unknown = [s for s in segs if s.mutating is None]
    if unknown:
        return CallClass(None, command, domains, "unknown: " + "; ".join(s.reason for s in unknown))
    return CallClass(False, command, domains, "; ".join(dict.fromkeys(s.reason for s in segs)))


@lru_cache(maxsize=4096)
def classify_command(command: str) -> CallClass:
    """Classify a shell command line (see module docstring). Never raises. Memoised
    (pure, and a history's commands are classified again on every lossy request)."""
    try:
        return _classify_chain(command)
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
    nouns = [w for w in words if w not in _READ_VERBS and w not in _WRITE_VERBS and len(w) > 2]
    if not nouns:
        return None
    n = nouns[-1]
    return "tool:" + (n[:-1] if n.endswith("s") and not n.endswith("ss") else n)


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
    words = _words(base)
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
        if isinstance(v, str) and (_SQL_MUT_RE.search(v) or _SQL_RO_RE.search(v)):
            seg = _sql_text_class(v, base)
            return CallClass(seg.mutating, None, frozenset(domains | {"db"}), seg.reason)
    # HTTP-carrying tools
    method = args.get("method")
    if isinstance(method, str) and method.upper() in ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"):
        ro = method.upper() in ("GET", "HEAD", "OPTIONS")
        return CallClass(not ro, None, frozenset(domains | {"http"}), f"{base} {method.upper()}")
    # a nested command for CLI-wrapping tools: {"command": "get pods"} on a tool named kubectl
    cmd = args.get("command") or args.get("args")
    if isinstance(cmd, str) and low in ("kubectl", "git", "terraform", "aws", "helm", "alembic", "stripe", "docker", "psql"):
        return classify_command(f"{low} {cmd}")
    if low in _NAMED_TOOLS:
        mut = _NAMED_TOOLS[low]
        return CallClass(mut, None, frozenset(domains | {"fs"} if low not in ("websearch", "webfetch", "web_search", "web_fetch", "task", "think", "ask_followup_question") else domains), f"tool {base}")
    if words:
        first = words[0]
        if "_".join(words[:2]) in _NAMED_TOOLS:
            mut = _NAMED_TOOLS["_".join(words[:2])]
            return CallClass(mut, None, frozenset(domains), f"tool {base}")
        if first in ("dry", "preview", "plan") or args.get("dry_run") is True or args.get("dryRun") is True:
            return CallClass(False, None, frozenset(domains), f"{base} (dry run)")
        if first in _READ_VERBS:
            return CallClass(False, None, frozenset(domains), f"verb {first}_")
        if first in _WRITE_VERBS:
            return CallClass(True, None, frozenset(domains), f"verb {first}_")
        # verb last: "refund_create", "deployment_rollback"
        last = words[-1]
        if last in _WRITE_VERBS and last not in ("log", "test"):
            return CallClass(True, None, frozenset(domains), f"verb _{last}")
        if last in _READ_VERBS:
            return CallClass(False, None, frozenset(domains), f"verb _{last}")
        # a verb in the middle: "payments_create_intent", "dns_list_records"
        mids = words[1:-1]
        for w in mids:
            if w in _WRITE_VERBS and w not in ("log", "test"):
                return CallClass(True, None, frozenset(domains), f"verb _{w}_")
        for w in mids:
            if w in _READ_VERBS:
                return CallClass(False, None, frozenset(domains), f"verb _{w}_")
        # an action argument: {"action": "create_refund"}
        act = args.get("action") or args.get("operation") or args.get("op")
        if isinstance(act, str):
            inner = classify_call(act, "")
            if inner.mutating is not None:
                return CallClass(inner.mutating, None, frozenset(domains | inner.domains), f"{base} action {act}")
    return CallClass(None, None, frozenset(domains), f"tool {base}: unknown")
