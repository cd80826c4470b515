"""How a known program's words decide whether one simple command reads or writes (pure,
table driven): one rule per program family (``git``, ``kubectl``, ``terraform``, SQL
clients, ``aws`` …), each answering a :class:`Seg` — mutating or not (``None`` unknown),
the resource domains touched, and a short reason. Chains, wrappers, redirections and
programs no table knows are :mod:`.shell`'s."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Seg:
    mutating: bool | None
    domains: frozenset[str]
    reason: str


#: Classifies the words of a command nested in another (``kubectl exec -- …``, ``find -exec …``).
Classifier = Callable[[list[str]], "Seg"]


# Programs that never change anything the agent could later need back.
READ_ONLY_PROGRAMS = frozenset(
    """ls ll la dir cat head tail less more grep egrep fgrep rg ag ack fd tree wc stat file du df pwd
    echo printf which whereis type whoami id env printenv date uname hostname sort uniq cut tr
    column nl diff cmp md5sum sha1sum sha256sum sha512sum shasum cksum readlink realpath basename
    dirname xxd od hexdump strings ps top htop free uptime netstat ss lsof dig nslookup host ping
    traceroute true false test [ [[ sleep cd pushd popd export set unset source . alias history
    man help jq yq bat exa eza tldr lsblk mount findmnt nproc lscpu arch locale whatis apropos
    pytest py.test mypy ruff flake8 pylint pyright black isort tox nox eslint tsc jest vitest
    mocha shellcheck hadolint tflint kubeval kubeconform yamllint hostnamectl timedatectl getent
    base64 openssl nvidia-smi vmstat iostat watch tput clear reset-terminal wait read""".split()
)
MUTATING_PROGRAMS = frozenset(
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
_GIT_ADDITIVE = frozenset({"add", "commit", "push", "pull", "clone", "init", "gc", "revert", "cherry-pick", "am", "merge", "checkout", "switch", "bisect"})
_GIT_REWRITE_FLAGS = frozenset({"--amend", "-f", "--force", "--force-with-lease", "--delete", "-d", "--mirror", "--prune", "--ff-only", "--rebase", "-r"})
GIT_OPTS_WITH_ARG = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace"})

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

SQL_MUT_RE = re.compile(
    r"\b(?:insert\s+into|update\s+\w[\w.\"]*\s+set|delete\s+from|create\s+(?:or\s+replace\s+)?(?:table|index|unique|database|schema|role|user|view|extension|sequence|function|trigger|type|materialized|publication|subscription|policy|domain|procedure|event|rule|server|tablespace|aggregate|collation|statistics|temp|temporary)|"
    r"drop\s+\w+|alter\s+\w+|truncate\b|grant\b|revoke\b|merge\s+into|upsert\b|copy\s+\S+\s+from|vacuum\b|reindex\b|cluster\b|"
    r"pg_terminate_backend|pg_drop_replication_slot|pg_create_\w+|set\s+(?:global|persist)|reset\s+master|purge\s+binary|"
    r"change\s+(?:master|replication)|start\s+(?:slave|replica)|stop\s+(?:slave|replica)|call\s+\w+|do\s+\$\$|begin\b[\s\S]*?\bcommit\b|"
    r"import\s+(?:into|table)|backup\s+(?:into|database|table)|restore\s+(?:from|database|table)|load\s+data|"
    r"refresh\s+materialized|(?:cancel|pause|resume)\s+jobs?\b)",
    re.I,
)
SQL_RO_RE = re.compile(r"(?:\bselect\b|\bshow\b|\bexplain\b|\bdescribe\b|\\d\w*|\\l\b|\\dt|\bwith\b[\s\S]+\bselect\b)", re.I)

_AWS_RO_OPS = re.compile(r"^(?:describe|list|get|head|wait|batch-get|lookup|search|scan|query|filter|select|estimate|preview|test|validate|check|tail|view|show|download|decode|simulate|verify)\b")
_AWS_S3_RO = frozenset({"ls", "presign"})



def ro(reason: str, *domains: str) -> Seg:
    return Seg(False, frozenset(domains), reason)


def mut(reason: str, *domains: str) -> Seg:
    return Seg(True, frozenset(domains), reason)


def unknown(reason: str, *domains: str) -> Seg:
    return Seg(None, frozenset(domains), reason)


def positional(args: list[str], opts_with_arg: frozenset[str] = frozenset()) -> list[str]:
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


def git(args: list[str]) -> Seg:
    pos = positional(args, GIT_OPTS_WITH_ARG)
    if not pos:
        return ro("git", "git")
    sub, rest = pos[0], args[args.index(pos[0]) + 1 :]
    rest_pos = positional(rest)
    if sub in _GIT_RO:
        return ro(f"git {sub}", "git")
    if sub in _GIT_ADDITIVE and not (set(rest) & _GIT_REWRITE_FLAGS) and not (sub in ("checkout", "switch") and set(rest) & {"-B", "-C", "--force-create"}):
        # adds history without moving or discarding what was read before
        return mut(f"git {sub}", "git:additive")
    if sub in _GIT_MUT:
        return mut(f"git {sub}", "git")
    if sub == "branch":
        if any(a in ("-d", "-D", "-m", "-M", "-f", "--delete", "--move", "--force", "-c", "-C", "--set-upstream-to", "-u") for a in rest):
            return mut("git branch (modify)", "git")
        listing = any(a in ("-a", "-r", "-l", "--list", "-v", "-vv", "--show-current", "--contains", "--merged", "--no-merged") for a in rest)
        return ro("git branch (list)", "git") if listing or not rest_pos else mut("git branch (create)", "git:additive")
    if sub == "tag":
        if any(a in ("-d", "--delete", "-a", "-s", "-f") for a in rest):
            return mut("git tag (modify)", "git")
        return ro("git tag (list)", "git") if not rest_pos or "-l" in rest or "--list" in rest else mut("git tag (create)", "git:additive")
    if sub == "stash":
        return ro("git stash list", "git") if rest_pos[:1] in (["list"], ["show"]) else mut("git stash", "git")
    if sub == "remote":
        return mut("git remote (modify)", "git") if rest_pos[:1] and rest_pos[0] in ("add", "remove", "rm", "rename", "set-url", "prune") else ro("git remote", "git")
    if sub == "config":
        return ro("git config (read)", "git") if any(a.startswith(("--get", "--list", "-l")) for a in rest) or len(rest_pos) <= 1 else mut("git config (set)", "git")
    if sub == "reflog":
        return mut("git reflog expire", "git") if rest_pos[:1] and rest_pos[0] in ("expire", "delete") else ro("git reflog", "git")
    if sub == "worktree":
        return ro("git worktree list", "git") if rest_pos[:1] == ["list"] else mut("git worktree", "git")
    if sub == "submodule":
        return ro("git submodule status", "git") if not rest_pos or rest_pos[0] in ("status", "summary", "foreach") else mut("git submodule", "git")
    if sub == "notes":
        return ro("git notes", "git") if not rest_pos or rest_pos[0] in ("list", "show") else mut("git notes", "git")
    if sub == "bisect":
        return ro("git bisect log", "git") if rest_pos[:1] in (["log"], ["visualize"], ["view"]) else mut("git bisect", "git")
    return unknown(f"git {sub}", "git")


def kubectl(args: list[str], prog: str, inner_words: Classifier) -> Seg:
    pos = positional(args, frozenset({"-n", "--namespace", "--context", "--kubeconfig", "-l", "--selector", "-o", "--output", "-c", "--container", "-f", "--filename"}))
    if not pos:
        return ro(prog, "k8s")
    sub = pos[0]
    if sub == "rollout":
        action = pos[1] if len(pos) > 1 else ""
        return ro(f"{prog} rollout {action}", "k8s") if action in ("status", "history") else mut(f"{prog} rollout {action}".strip(), "k8s")
    if sub == "config":
        action = pos[1] if len(pos) > 1 else ""
        return ro(f"{prog} config {action}", "k8s") if action in ("view", "get-contexts", "current-context", "get-clusters", "get-users") else mut(f"{prog} config {action}", "k8s")
    if sub == "exec":
        if "--" in args:
            inner = args[args.index("--") + 1 :]
            seg = inner_words(inner)
            return Seg(seg.mutating, seg.domains | {"k8s"}, f"{prog} exec: {seg.reason}")
        return unknown(f"{prog} exec", "k8s")
    if sub in _KUBECTL_RO:
        return ro(f"{prog} {sub}", "k8s")
    if sub in _KUBECTL_MUT:
        return mut(f"{prog} {sub}", "k8s")
    return unknown(f"{prog} {sub}", "k8s")


def helm(args: list[str]) -> Seg:
    pos = positional(args, frozenset({"-n", "--namespace", "-f", "--values", "--set", "--version", "--kube-context"}))
    sub = pos[0] if pos else ""
    if sub == "repo":
        return ro("helm repo list", "k8s") if pos[1:2] == ["list"] else mut("helm repo", "k8s")
    if sub in _HELM_RO:
        return ro(f"helm {sub}", "k8s")
    if sub in _HELM_MUT:
        return mut(f"helm {sub}", "k8s")
    return unknown(f"helm {sub}", "k8s")


def terraform(args: list[str], prog: str) -> Seg:
    pos = positional([a for a in args if not a.startswith("-chdir")])
    sub = pos[0] if pos else ""
    if sub == "state":
        action = pos[1] if len(pos) > 1 else ""
        return ro(f"{prog} state {action}", "terraform") if action in ("list", "show", "pull") else mut(f"{prog} state {action}", "terraform")
    if sub == "workspace":
        action = pos[1] if len(pos) > 1 else ""
        return ro(f"{prog} workspace {action}", "terraform") if action in ("list", "show") else mut(f"{prog} workspace {action}", "terraform")
    if sub == "fmt":
        return ro(f"{prog} fmt -check", "terraform") if "-check" in args or "--check" in args else mut(f"{prog} fmt", "terraform", "fs")
    if sub in _TF_RO:
        return ro(f"{prog} {sub}", "terraform")
    if sub in _TF_MUT:
        return mut(f"{prog} {sub}", "terraform")
    return unknown(f"{prog} {sub}", "terraform")


#: A statement that only adds (a row inserted, an object created — not replaced — or a
#: replication slot made by ``pg_create_…``): what was read before it stays valid.
_SQL_ADDS = re.compile(r"\s*(?:insert\s+into\b|create\s+(?!or\s+replace\b)|select\s+(?:\*\s+from\s+)?pg_create_\w+\s*\()", re.I)

_SQL_UPSERT = re.compile(r"\bon\s+(?:conflict|duplicate\s+key)\b", re.I)


def sql_text_class(text: str, reason: str) -> Seg:
    if SQL_MUT_RE.search(text):
        statements = [st for st in text.split(";") if st.strip()]
        if statements and all(_SQL_ADDS.match(st) and not _SQL_UPSERT.search(st) for st in statements):
            return mut(f"{reason} (adding SQL)", "db:additive")
        return mut(f"{reason} (write SQL)", "db")
    if SQL_RO_RE.search(text):
        return ro(f"{reason} (read SQL)", "db")
    return unknown(reason, "db")


def sql_client(args: list[str], prog: str, raw: str) -> Seg:
    sql_parts: list[str] = []
    for i, a in enumerate(args):
        if a in ("-c", "--command", "-e", "--execute") and i + 1 < len(args):
            sql_parts.append(args[i + 1])
        elif a.startswith(("--command=", "--execute=")):
            sql_parts.append(a.split("=", 1)[1])
    if prog == "sqlite3":
        pos = positional(args)
        sql_parts.extend(pos[1:])
    if sql_parts:
        return sql_text_class(" ".join(sql_parts), prog)
    # heredoc / piped SQL: classify the raw segment text
    return sql_text_class(raw, prog) if ("<<" in raw or "SELECT" in raw.upper()) else unknown(prog, "db")


def aws(args: list[str]) -> Seg:
    pos = positional(args, frozenset({"--region", "--profile", "--output", "--query", "--endpoint-url", "--bucket", "--key", "--upload-id", "--cli-input-json"}))
    if len(pos) < 1:
        return unknown("aws")
    service = pos[0]
    domain = "aws:s3" if service in ("s3", "s3api") else f"aws:{service}"
    op = pos[1] if len(pos) > 1 else ""
    if service == "s3":
        if op in _AWS_S3_RO:
            return ro(f"aws s3 {op}", domain)
        return mut(f"aws s3 {op}", domain)
    if service == "configure":
        return ro("aws configure list", "aws") if op in ("list", "get", "list-profiles") else mut("aws configure", "aws")
    if service == "sts":
        return ro(f"aws sts {op}", domain)
    if _AWS_RO_OPS.match(op):
        return ro(f"aws {service} {op}", domain)
    if op:
        return mut(f"aws {service} {op}", domain)
    return unknown(f"aws {service}", domain)


def cloud_cli(args: list[str], prog: str) -> Seg:
    pos = positional(args)
    for w in pos:
        if w in ("list", "describe", "show", "get", "get-iam-policy", "read", "info", "logs", "tail", "versions"):
            return ro(f"{prog} … {w}", prog)
        if w in ("create", "delete", "update", "deploy", "set", "add", "remove", "start", "stop", "restart", "apply", "import", "resize", "rollback", "cancel", "submit"):
            return mut(f"{prog} … {w}", prog)
    return unknown(prog, prog)


def stripe(args: list[str]) -> Seg:
    pos = positional(args, frozenset({"-d", "--data", "--api-key", "--stripe-account", "-c"}))
    if not pos:
        return unknown("stripe", "stripe")
    if pos[0] in ("get", "listen", "logs", "status", "version", "samples", "open", "config", "login", "help"):
        return ro(f"stripe {pos[0]}", "stripe")
    if pos[0] in ("post", "delete", "trigger", "fixtures"):
        return mut(f"stripe {pos[0]}", "stripe")
    op = pos[1] if len(pos) > 1 else ""
    if op in ("list", "retrieve", "search", "get", "upcoming", "list_line_items"):
        return ro(f"stripe {pos[0]} {op}", "stripe")
    if op:
        return mut(f"stripe {pos[0]} {op}", "stripe")
    return unknown(f"stripe {pos[0]}", "stripe")


def kafka(prog: str, args: list[str]) -> Seg:
    flags = set(args)
    if "consumer-groups" in prog:
        if "--reset-offsets" in flags:
            return ro(f"{prog} --reset-offsets --dry-run", "kafka") if "--dry-run" in flags and "--execute" not in flags else mut(f"{prog} --reset-offsets", "kafka")
        if "--delete" in flags or "--delete-offsets" in flags:
            return mut(f"{prog} --delete", "kafka")
        return ro(f"{prog}", "kafka")
    if "topics" in prog or "configs" in prog or "acls" in prog:
        if flags & {"--create", "--delete", "--alter", "--add", "--remove"}:
            return mut(prog, "kafka")
        return ro(prog, "kafka")
    if "console-producer" in prog or "producer-perf" in prog or "delete-records" in prog or "reassign" in prog or "leader-election" in prog:
        return mut(prog, "kafka")
    if prog in ("kcat", "kafkacat"):
        return mut(prog, "kafka") if "-P" in flags else ro(prog, "kafka")
    return ro(prog, "kafka")


_REDIS_RO = frozenset(
    """get mget getrange strlen exists type ttl pttl keys scan sscan hscan zscan dbsize info ping
    echo time hget hmget hgetall hkeys hvals hlen hexists lrange llen lindex smembers sismember
    scard srandmember zrange zrevrange zrangebyscore zscore zcard zrank zcount xrange xrevrange
    xlen xinfo xpending xread monitor slowlog config client memory object debug lastsave role
    pubsub subscribe psubscribe dump bitcount getbit geopos geodist pfcount""".split()
)
_REDIS_APPEND = frozenset({"xadd", "lpush", "rpush", "sadd", "pfadd", "publish", "geoadd"})
_REDIS_OPTS_WITH_ARG = frozenset({"-h", "-p", "-s", "-a", "-u", "-n", "--user", "--pass", "-r", "-i", "--tls-cert", "--tls-key", "--cacert"})


def redis_cli(args: list[str]) -> Seg:
    """``redis-cli [opts] COMMAND …``: a command outside the read-only set writes (``SET``,
    ``XADD``, ``XACK``, ``DEL``, ``EXPIRE`` …); ``XREADGROUP`` moves a group's cursor."""
    pos = positional(args, _REDIS_OPTS_WITH_ARG)
    if not pos:
        return unknown("redis-cli", "redis")
    cmd = pos[0].lower()
    if cmd in ("config", "client") and len(pos) > 1 and pos[1].lower() in ("set", "kill", "rewrite", "resetstat"):
        return mut(f"redis-cli {cmd} {pos[1].lower()}", "redis")
    if cmd in _REDIS_RO:
        return ro(f"redis-cli {cmd}", "redis")
    if cmd in _REDIS_APPEND:
        return mut(f"redis-cli {cmd}", "redis:additive")  # what was read before stays valid
    return mut(f"redis-cli {cmd}", "redis")


_CELERY_RO = frozenset({"inspect", "status", "report", "events", "result", "graph", "list", "shell", "help", "worker", "beat", "flower"})
_CELERY_OPTS_WITH_ARG = frozenset({"-A", "--app", "-b", "--broker", "--result-backend", "--loader", "--config", "--workdir", "-C", "-Q", "--queue", "--destination", "-d", "-t", "--timeout"})


def celery(args: list[str]) -> Seg:
    """``celery -A app call task`` sends a task (its id is what it made), ``control
    revoke|shutdown|…`` and ``purge`` change the cluster; ``inspect``, ``status``,
    ``result`` read (``worker`` and ``beat`` run the service, they change nothing)."""
    pos = positional(args, _CELERY_OPTS_WITH_ARG)
    sub = pos[0] if pos else ""
    if sub == "call":
        return mut("celery call", "celery:additive")  # one more task: the others stay as read
    if sub in ("purge", "migrate", "upgrade", "amqp"):
        return mut(f"celery {sub}", "celery")
    if sub == "control":
        return mut(f"celery control {' '.join(pos[1:2])}".strip(), "celery")
    if sub in _CELERY_RO:
        return ro(f"celery {sub}", "celery")
    return unknown(f"celery {sub}".strip(), "celery")


def docker(args: list[str], prog: str) -> Seg:
    pos = positional(args)
    sub = pos[0] if pos else ""
    if sub in ("compose", "container", "image", "buildx", "manifest", "volume", "network", "system", "context") and len(pos) > 1:
        sub2 = pos[1]
        if sub2 in ("ps", "ls", "list", "logs", "inspect", "config", "images", "top", "version", "df", "imagetools", "history"):
            return ro(f"{prog} {sub} {sub2}", "docker")
        return mut(f"{prog} {sub} {sub2}", "docker")
    if sub in ("ps", "images", "inspect", "logs", "version", "info", "history", "search", "stats", "top", "diff", "port", "events", "pull", "login"):
        return ro(f"{prog} {sub}", "docker")
    if sub == "exec":
        return unknown(f"{prog} exec", "docker")
    return mut(f"{prog} {sub}", "docker") if sub else unknown(prog, "docker")


def python(args: list[str], raw: str) -> Seg:
    pos = positional(args)
    if "-m" in args:
        mod = args[args.index("-m") + 1] if args.index("-m") + 1 < len(args) else ""
        rest = args[args.index("-m") + 2 :]
        if mod in ("pytest", "mypy", "pyflakes", "flake8", "pylint", "ruff", "unittest", "doctest", "pydoc", "json.tool", "timeit", "http.server", "pip_audit", "compileall", "black", "isort") and not (mod in ("black", "isort", "ruff") and "--check" not in rest and "check" not in rest):
            return ro(f"python -m {mod}")
        if mod == "pip":
            return pip(rest)
        if mod == "alembic":
            return alembic(rest)
        if mod == "django":
            return django(rest)
        return unknown(f"python -m {mod}")
    if pos and pos[0].endswith("manage.py"):
        return django(pos[1:] + [a for a in args if a.startswith("-")])
    return unknown("python")


def pip(args: list[str]) -> Seg:
    pos = positional(args)
    sub = pos[0] if pos else ""
    if sub in ("list", "show", "freeze", "check", "search", "index", "inspect", "debug", "config", "help", "download", "hash", "cache"):
        return ro(f"pip {sub}", "pkg")
    return mut(f"pip {sub}", "pkg") if sub else unknown("pip")


def _by_subcommand(label: str, sub: str, read_only: frozenset[str], mutating: frozenset[str]) -> Seg:
    """Classify a migration tool by its subcommand (all of them touch the ``db`` domain)."""
    name = f"{label} {sub}"
    if sub in read_only:
        return ro(name, "db", "db:migrate")
    if sub in mutating:
        return mut(name, "db", "db:migrate")
    return unknown(name, "db", "db:migrate")


def alembic(args: list[str]) -> Seg:
    pos = positional(args, frozenset({"-c", "--config", "-n", "--name", "-x"}))
    return _by_subcommand("alembic", pos[0] if pos else "", _ALEMBIC_RO, _ALEMBIC_MUT)


def django(args: list[str]) -> Seg:
    pos = positional(args, frozenset({"--settings", "--database", "--pythonpath"}))
    return _by_subcommand("manage.py", pos[0] if pos else "", _DJANGO_RO, _DJANGO_MUT)


def flyway(args: list[str]) -> Seg:
    pos = [a for a in positional(args) if "=" not in a]
    return _by_subcommand("flyway", pos[0] if pos else "", _FLYWAY_RO, _FLYWAY_MUT)


_CURL_BODY_OPTS = frozenset(("-d", "--data", "--data-raw", "--data-binary", "--json"))


def curl(args: list[str], prog: str) -> Seg:
    method = None
    for i, a in enumerate(args):
        if a in ("-X", "--request") and i + 1 < len(args):
            method = args[i + 1].upper()
        elif a.startswith("-X") and len(a) > 2:
            method = a[2:].upper()
        elif a in ("-d", "--data", "--data-raw", "--data-binary", "--data-urlencode", "-F", "--form", "-T", "--upload-file", "--json"):
            method = method or "POST"
    if prog == "http" or prog == "https":  # httpie: http [METHOD] URL
        pos = positional(args)
        if pos and pos[0].upper() in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"):
            method = pos[0].upper()
    if method in (None, "GET", "HEAD", "OPTIONS"):
        return ro(f"{prog} {method or 'GET'}", "http")
    if method == "POST" and any(posts_a_read(a) for a in positional(args, _CURL_OPTS_WITH_ARG)) and not any(writes_in_body(a) for a in args):
        return ro(f"{prog} POST (read endpoint)", "http")
    bodies = [args[i + 1] for i, a in enumerate(args[:-1]) if a in _CURL_BODY_OPTS]
    if method == "POST" and bodies and all(graphql_query(b) for b in bodies):
        return ro(f"{prog} POST (GraphQL query)", "http", "graphql")
    return mut(f"{prog} {method}", "http")


_CURL_OPTS_WITH_ARG = frozenset(
    "-X --request -d --data --data-raw --data-binary --data-urlencode -F --form -T --upload-file --json -H --header "
    "-u --user -o --output -A --user-agent -b --cookie -e --referer -w --write-out --max-time -m --connect-timeout".split()
)
#: The last segment of an RPC-style endpoint that only reads (Plaid's ``/accounts/balance/get``,
#: Elasticsearch's ``/_search``, Google's ``:batchGet``), whatever method carries it.
_READ_ENDPOINT = re.compile(
    r"(?i)(?:/|:|/_)(?:get|list|search|msearch|query|lookup|describe|find|count|batch[-_]?get|retrieve|fetch|validate|explain|preview)(?:[?#].*)?$"
)


#: A GraphQL document's operation: ``mutation …``, ``query …`` or a bare selection set
#: ``{ … }`` (a query); a subscription reads.
GRAPHQL_OP = re.compile(r"\s*(?:#[^\n]*\n\s*)*(?:(mutation|query|subscription)\b[^{]*\{|(\{)\s*[A-Za-z_])")


def graphql_query(body: str) -> bool:
    """A JSON request body carrying a GraphQL document that is a query, not a mutation
    (``{"query": "{ runsOrError(…) { … } }"}``): the GraphQL operation decides, not the
    POST that carries it (PRINCIPLES §2: what ran decides)."""
    try:
        obj = json.loads(body)
    except ValueError:
        return False
    doc = obj.get("query") if isinstance(obj, dict) else None
    if not isinstance(doc, str):
        return False
    op = GRAPHQL_OP.match(doc)
    return op is not None and op.group(1) != "mutation" and not writes_in_body(doc)


def writes_in_body(text: str) -> bool:
    """A request body that changes state whatever endpoint carries it: a SQL write
    (``q=DROP DATABASE metrics``) or a GraphQL mutation."""
    return SQL_MUT_RE.search(text) is not None or re.search(r"\bmutation\b", text) is not None


def posts_a_read(url: str) -> bool:
    """A POST to an endpoint named by a read verb reads (PRINCIPLES §2: what ran decides;
    RPC-style APIs post their queries)."""
    return "/" in url and _READ_ENDPOINT.search(url.strip("'\"").rstrip("/")) is not None


def sed_like(args: list[str], prog: str) -> Seg:
    if any(a == "-i" or a.startswith("-i") or a == "--in-place" for a in args):
        return mut(f"{prog} -i", "fs")
    return ro(prog)


def find(args: list[str], inner_words: Classifier) -> Seg:
    if any(a in ("-delete", "-exec", "-execdir", "-ok", "-fprint") for a in args):
        if "-exec" in args:
            inner = args[args.index("-exec") + 1 :]
            inner = inner[: inner.index(";")] if ";" in inner else inner
            seg = inner_words([w for w in inner if w not in ("{}", "+", "\\;")])
            if seg.mutating is False:
                return ro("find -exec (read)", "fs")
        return mut("find -delete/-exec", "fs")
    return ro("find")


def tar_like(args: list[str], prog: str) -> Seg:
    if prog == "tar":
        flags = "".join(a.lstrip("-") for a in args[:1]) + "".join(a for a in args if a.startswith("-"))
        if "t" in flags and "x" not in flags and "c" not in flags:
            return ro("tar -t")
        return mut("tar", "fs")
    if prog == "unzip":
        return ro("unzip -l") if "-l" in args or "-t" in args else mut("unzip", "fs")
    return mut(prog, "fs")


def pkg_manager(args: list[str], prog: str) -> Seg:
    pos = positional(args)
    sub = pos[0] if pos else ""
    if sub in ("test", "ls", "list", "view", "info", "outdated", "audit", "why", "search", "show", "check", "config", "help", "version", "--version", "bin", "root", "prefix", "doctor", "tree", "metadata", "clippy", "fmt-check", "vet", "lint", "env"):
        return ro(f"{prog} {sub}")
    if sub in ("run", "exec", "x", "dlx", "build", "start", "dev", "serve"):
        script = pos[1] if len(pos) > 1 else ""
        if script in ("test", "lint", "check", "typecheck", "format:check"):
            return ro(f"{prog} {sub} {script}")
        return unknown(f"{prog} {sub} {script}".strip())
    return mut(f"{prog} {sub}", "pkg") if sub else unknown(prog)


def make(args: list[str]) -> Seg:
    pos = positional(args)
    if pos and all(p in ("test", "check", "lint", "typecheck", "help", "fmt-check", "vet") for p in pos):
        return ro("make " + " ".join(pos))
    return unknown("make")


def systemctl(args: list[str], prog: str) -> Seg:
    pos = positional(args)
    if pos and pos[0] in ("status", "show", "list-units", "list-unit-files", "is-active", "is-enabled", "cat", "list-timers"):
        return ro(f"{prog} {pos[0]}")
    return mut(f"{prog} {' '.join(pos[:1])}".strip())


def crontab(args: list[str]) -> Seg:
    return ro("crontab -l") if "-l" in args else mut("crontab")

