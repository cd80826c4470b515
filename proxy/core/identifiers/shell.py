"""A shell command line's classification (pure): the line split into simple commands,
each stripped of environment assignments and neutral wrappers (``sudo``, ``timeout`` …),
judged by its program's rule (:mod:`.programs`), by its flags and verbs when no rule
knows the program, and by its redirections; a chain mutates if any of its commands does."""

from __future__ import annotations

import itertools
import re
import shlex

from . import programs as rules
from .callkinds import APPEND_VERBS, CLI_WRITE_VERBS, READ_VERBS, WRITE_VERBS, CallClass, code_verb
from .programs import (
    MUTATING_PROGRAMS,
    READ_ONLY_PROGRAMS,
    SQL_MUT_RE,
    SQL_RO_RE,
    Seg,
    mut,
    positional,
    ro,
    sql_text_class,
    unknown,
)

__all__ = ["classify_chain", "file_domain", "split_segments"]


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


_NEUTRAL_WRAPPERS = frozenset({"sudo", "time", "nohup", "nice", "ionice", "command", "builtin", "exec", "stdbuf", "unbuffer"})


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
_ASYNC_FLAGS = frozenset({"--async", "--nosync", "--no-wait", "--no_wait", "--background"})
_RW_FLAGS = frozenset({"--execute", "--apply", "--force", "--yes", "-y", "--confirm", "--commit", "--approve", "--auto-approve", "--no-dry-run"})
#: Read verbs that decide a command even after a noun that is also a verb (``gh run list``).
_STRICT_READ = frozenset(
    """get list ls describe show status view info inspect cat logs log history search query watch
    diff whoami version help lookup find fetch tail head read print explain check""".split()
)
_CLI_SPLIT = re.compile(r"[-_.:]+")
#: Flags whose value is code for an interpreter or a query language.
_CODE_FLAGS = frozenset({"--eval", "-e", "--command", "-c", "--execute", "--query", "-q", "--script"})


def _generic_cli(prog: str, args: list[str], seg: Seg) -> Seg:
    """A command no table knows, judged by what it says (PRINCIPLES §2, "a tool the gate has
    never heard of is judged by what its call and output say"): a dry-run or check flag
    reads; an ``--execute``/``--apply``/``--async``/``--force`` flag acts; otherwise the
    verbs among the program's name parts and its first positional words (``backup-put``,
    ``etcdctl lease grant``, ``flagctl set``, ``gh run list``) decide, a strict read verb
    winning over a noun that happens to be a verb. SQL text in an argument decides by the
    statement. ``None`` stays when nothing speaks."""
    flags = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    if flags & _RO_FLAGS:
        return Seg(False, seg.domains, f"{seg.reason} (dry run)")
    for a in args:
        if not a.startswith("-") and " " in a.strip() and (SQL_MUT_RE.search(a) or SQL_RO_RE.match(a.strip())):
            sql = sql_text_class(a, prog)
            return Seg(sql.mutating, seg.domains | sql.domains, sql.reason)
    parts = [w.lower() for w in _CLI_SPLIT.split(prog) if w]
    words = parts if len(parts) > 1 else []  # a compound name speaks (backup-put, deploy.sh); make does not
    for i, a in enumerate(args):  # code passed to the program's shell: db.orders.updateOne(…)
        if a in _CODE_FLAGS and i + 1 < len(args):
            verb = code_verb(args[i + 1], bare_methods_act=True)
            if verb is not None:
                return Seg(verb != "read", seg.domains, f"{seg.reason} (code {verb})")
    words += [w.lower() for a in positional(args)[:3] for w in _CLI_SPLIT.split(a) if w and "/" not in a and "=" not in a]
    if flags & _ASYNC_FLAGS:
        # run in the background: even a query starts a job, and its id is what it made
        return Seg(True, seg.domains, f"{seg.reason} (async)")
    if any(w in _STRICT_READ for w in words):
        return Seg(False, seg.domains, f"{seg.reason} (verb)")
    if flags & _RW_FLAGS:
        return Seg(True, seg.domains, f"{seg.reason} (flag)")
    for w in words:
        if w in APPEND_VERBS:
            # one more of something (a message sent, a record created): what was read stays
            return Seg(True, seg.domains | {f"{prog}:additive"}, f"{seg.reason} (verb {w})")
        if w in WRITE_VERBS or w in CLI_WRITE_VERBS:
            return Seg(True, seg.domains, f"{seg.reason} (verb {w})")
        if w in READ_VERBS:
            return Seg(False, seg.domains, f"{seg.reason} (verb {w})")
    if args and args[0].startswith("--"):
        # nothing else spoke: a program whose commands are options (``gpg
        # --full-generate-key``, ``gpg --list-keys``) — the long options before its first
        # operand, a write verb over a read one (``--show-diff`` modifies, ``--import``
        # acts), ``--no-…`` options left out
        lead = [a for a in itertools.takewhile(lambda a: a.startswith("-"), args) if a.startswith("--") and not a.startswith("--no-")]
        opts = [w.lower() for a in lead for w in _CLI_SPLIT.split(a.split("=", 1)[0]) if w]
        acts = [w for w in opts if w in WRITE_VERBS or w in CLI_WRITE_VERBS]
        if acts:
            return Seg(True, seg.domains, f"{seg.reason} (option {acts[0]})")
        looks = [w for w in opts if w in _STRICT_READ or w in READ_VERBS]
        if looks:
            return Seg(False, seg.domains, f"{seg.reason} (option {looks[0]})")
    return seg


def _classify_words(words: list[str], raw: str = "") -> Seg:
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
        return ro("empty")
    redirect = _has_write_redirect(ws)
    prog_path, args = ws[0], ws[1:]
    prog = prog_path.rsplit("/", 1)[-1]
    if prog in ("bash", "sh", "zsh", "dash") and len(args) >= 2 and args[0] in ("-c", "-lc", "-ic", "-ec", "-xc"):
        c = classify_chain(args[1])
        return Seg(c.mutating, c.domains, c.reason)
    seg = _dispatch(prog, args, raw or " ".join(ws))
    if seg.mutating is None:
        seg = _generic_cli(prog, args, seg)
    files = _file_domains(prog, args) if seg.domains <= {"fs"} else frozenset()
    if redirect:
        files |= _redirect_targets(ws)
    if redirect and seg.mutating is not True:
        return Seg(True, seg.domains | {"fs"} | files, f"{seg.reason} > file")
    return Seg(seg.mutating, seg.domains | files, seg.reason) if files else seg


def _dispatch(prog: str, args: list[str], raw: str) -> Seg:
    if prog == "git":
        return rules.git(args)
    if prog in ("kubectl", "oc", "k", "kubecolor", "microk8s.kubectl"):
        return rules.kubectl(args, prog, _classify_words)
    if prog == "helm":
        return rules.helm(args)
    if prog in ("terraform", "tofu", "terragrunt"):
        return rules.terraform(args, prog)
    if prog == "alembic":
        return rules.alembic(args)
    if prog in ("flyway",):
        return rules.flyway(args)
    if prog in ("django-admin", "manage.py"):
        return rules.django(args)
    if prog in ("python", "python3", "python3.11", "python3.12", "python3.10", "py", "uv", "poetry", "pipenv"):
        if prog in ("uv", "poetry", "pipenv") and args[:1] == ["run"]:
            return _classify_words(args[1:], raw)
        if prog in ("uv", "poetry", "pipenv"):
            return rules.pkg_manager(args, prog)
        return rules.python(args, raw)
    if prog in ("psql", "mysql", "mariadb", "sqlite3", "sqlcmd", "cockroach", "clickhouse-client"):
        return rules.sql_client(args, prog, raw)
    if prog in ("pg_dump", "pg_dumpall", "mysqldump", "pg_isready", "pg_controldata", "pg_waldump"):
        return ro(prog, "db")
    if prog in ("pg_restore", "createdb", "dropdb", "pg_ctl", "pg_resetwal"):
        return mut(prog, "db")
    if prog == "aws":
        return rules.aws(args)
    if prog in ("gcloud", "gsutil", "az", "doctl", "flyctl", "fly", "heroku", "vercel"):
        return rules.cloud_cli(args, prog)
    if prog == "stripe":
        return rules.stripe(args)
    if prog.startswith("kafka-") or prog in ("kcat", "kafkacat"):
        return rules.kafka(prog.removesuffix(".sh"), args)
    if prog == "celery":
        return rules.celery(args)
    if prog in ("redis-cli", "valkey-cli", "keydb-cli"):
        return rules.redis_cli(args)
    if prog in ("docker", "podman", "nerdctl", "docker-compose"):
        return rules.docker(args, prog)
    if prog in ("crane", "skopeo", "regctl", "cosign"):
        pos = positional(args)
        return ro(f"{prog} {pos[0] if pos else ''}".strip(), "docker") if pos and pos[0] in ("digest", "inspect", "manifest", "ls", "config", "list-tags", "verify", "tree", "triangulate") else mut(prog, "docker")
    if prog in ("pip", "pip3"):
        return rules.pip(args)
    if prog in ("npm", "yarn", "pnpm", "cargo", "go", "gradle", "mvn", "bundle", "gem", "composer", "bun", "deno", "dotnet"):
        return rules.pkg_manager(args, prog)
    if prog in ("rake", "rails", "bin/rails"):
        pos = positional(args)
        if pos and any(p.startswith("db:") for p in pos):
            status_only = all(p in ("db:migrate:status", "db:version", "db:schema:dump") for p in pos if p.startswith("db:"))
            return ro(f"{prog} db status", "db", "db:migrate") if status_only else mut(f"{prog} {pos[0]}", "db", "db:migrate")
        return unknown(prog)
    if prog in ("prisma", "knex", "sequelize", "goose", "migrate", "dbmate", "atlas", "liquibase", "sqitch"):
        joined = " ".join(args)
        if re.search(r"\b(status|info|history|validate|version|diff|inspect|list|log|verify|lint)\b", joined) and not re.search(r"\b(deploy|up|latest|migrate:latest|dev|reset|apply|update|rollback|down|push|redo|revert)\b", joined):
            return ro(f"{prog} status", "db", "db:migrate")
        return mut(f"{prog} {joined}".strip(), "db", "db:migrate")
    if prog in ("curl", "wget", "http", "https", "xh"):
        if prog == "wget":
            return ro("wget") if "--spider" in args or "-O-" in args or "-qO-" in args else mut("wget", "fs")
        return rules.curl(args, prog)
    if prog in ("sed", "perl", "yq", "gsed"):
        return rules.sed_like(args, prog)
    if prog == "awk" or prog == "gawk":
        return mut("awk -i inplace", "fs") if "inplace" in " ".join(args) else ro("awk")
    if prog == "find":
        return rules.find(args, _classify_words)
    if prog in ("tar", "unzip"):
        return rules.tar_like(args, prog)
    if prog == "make":
        return rules.make(args)
    if prog in ("systemctl", "service", "launchctl"):
        return rules.systemctl(args, prog)
    if prog == "crontab":
        return rules.crontab(args)
    if prog in ("apt", "apt-get", "yum", "dnf", "brew", "apk", "snap", "pacman"):
        pos = positional(args)
        if pos and pos[0] in ("list", "search", "show", "info", "policy", "depends", "rdepends", "madison"):
            return ro(f"{prog} {pos[0]}", "pkg")
        return mut(f"{prog} {' '.join(pos[:1])}".strip(), "pkg")
    if prog in ("black", "isort", "prettier", "gofmt", "rustfmt", "ruff"):
        joined = " ".join(args)
        if prog == "ruff" and args[:1] == ["check"] and "--fix" not in args:
            return ro("ruff check")
        if "--check" in args or "--diff" in args or "-l" in args or "--list-different" in joined:
            return ro(f"{prog} --check")
        if prog == "ruff" and args[:1] != ["format"]:
            return ro("ruff")
        return mut(prog, "fs")
    if prog in READ_ONLY_PROGRAMS:
        return ro(prog)
    if prog in MUTATING_PROGRAMS:
        return mut(prog, "fs")
    return unknown(prog)


def classify_chain(command: str) -> CallClass:
    segs = [_classify_words(ws, " ".join(ws)) for ws in split_segments(command)]
    if not segs:
        return CallClass(None, command, frozenset(), "empty command")
    domains: frozenset[str] = frozenset().union(*(s.domains for s in segs))
    muts = [s for s in segs if s.mutating is True]
    if muts:
        return CallClass(True, command, domains, "; ".join(s.reason for s in muts))
    undecided = [s for s in segs if s.mutating is None]
    if undecided:
        return CallClass(None, command, domains, "unknown: " + "; ".join(s.reason for s in undecided))
    return CallClass(False, command, domains, "; ".join(dict.fromkeys(s.reason for s in segs)))

