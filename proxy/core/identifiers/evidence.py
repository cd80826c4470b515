"""Evidence about a step and about a value inside its output (pure functions).

What the provenance rules (:mod:`.provenance`) ask, answered from the call and its output
rather than from a table of known tools (the tables of :mod:`.commands` are one source):

- :func:`output_says_changed` — does the output say that something changed (``created``,
  ``applied``, ``Running upgrade A -> B``, ``acquired``, ``stored at``, a pending
  operation, ``HTTP/1.1 201``)? Or that nothing did (``dry run``, ``would be``)?
- :func:`creates` — does the step make something new (create, run, acquire, upload …)
  rather than change something that exists (update, set, patch, delete …)?
- :func:`link_keys` — the names of the resources a step touches (its argument words that
  are names, not verbs, flags or scopes) and the implicit resources of a few tools (the
  checked-out branch for git history rewrites, the schema revision for migration tools,
  a file by base name): a later change *links* to an earlier read through them.
- :func:`is_history` — a read that lists past records (``log``, ``history``): its
  entries stay valid after a change, so they are not prior state.
- :func:`prior_marked`, :func:`preexisting_line`, :func:`identity_label` — what the text
  around a value says it is: the state before a change (``previous image:``, ``A -> B``,
  a ``Previous offsets:`` block), the id of a resource that already existed
  (``Modifying... [id=…]``), or the identity of a listed entity (``"id": …``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from .callkinds import CREATE_VERBS, MODIFY_VERBS, name_words, phrasal_verb
from .commands import classify_command, split_segments
from .programs import GIT_OPTS_WITH_ARG, positional

__all__ = [
    "creates",
    "identity_label",
    "is_history",
    "link_keys",
    "moves_between_commits",
    "names_the_call",
    "output_says_changed",
    "preexisting_line",
    "prior_marked",
    "reference_nouns",
    "reports_failure",
    "scope_reference",
]

# --------------------------------------------------------------------------- state change

_CHANGED = re.compile(
    r"(?im)\b(?:created|creating|creation complete|applied|applying|running upgrade|running downgrade|"
    r"migrat(?:ed|ing)|started|starting|launched|acquired|granted|locked|reset|uploaded|uploading|"
    r"stored (?:at|in|as)|saved (?:to|at|as)|written to|wrote|deployed|deploying|rolled out|rolling out|"
    r"updated|modified|patched|configured|deleted|removed|destroyed|terminated|terminating|submitted|"
    r"queued|scheduled|enqueued|committed|pushed|tagged|merged|restored|promoted|switched|flipped|"
    r"issued|minted|generated|registered|provisioned|provisioning|allocated|reserved|charged|refunded|"
    r"captured|cancell?ed|revoked|rotated|renewed|released|accepted for processing)\b"
    r"|\bHTTP/[\d.]+ 20[12]\b|\b20[12] (?:Created|Accepted)\b"
    r"|\b(?:modified|matched|inserted|upserted|deleted)_?[Cc]ount\W{1,3}[1-9]|\bn(?:Modified|Upserted|Inserted|Removed)\W{1,3}[1-9]|\binsertedId\W{1,3}[\"'\w]"
    r"|\b\d+ rows? affected\b|^(?:UPDATE|DELETE|INSERT \d+) [1-9]\d*$"
    r"|[\"']?(?:status|state)[\"']?\s*[:=]\s*[\"']?(?:pending|creating|in_progress|in progress|running|queued|provisioning|submitted)\b"
)
_UNCHANGED = re.compile(r"(?i)\b(?:dry[ -]?run|would be (?:created|applied|changed|deleted)|no changes|nothing to (?:do|commit|change)|plan only)\b")


@lru_cache(maxsize=2048)
def output_says_changed(text: str) -> bool | None:
    """``True`` when the output reports a change, ``False`` when it says nothing changed
    (a dry run), ``None`` when it says neither."""
    if not text:
        return None
    if _UNCHANGED.search(text):
        return False
    return True if _CHANGED.search(text) else None


#: An HTTP response that reports a client or server error: its status line opens the output.
_HTTP_FAILED = re.compile(r"\A\s*HTTP/\d(?:\.\d)?\s+[45]\d\d\b")


def reports_failure(output: str) -> bool:
    """Whether a step's output says the step failed: an HTTP response with a 4xx or 5xx
    status. A failed step made nothing: what its output names (the resource that stood in
    its way, the error's ids) is no handle of something it created (PRINCIPLES §2a)."""
    return bool(_HTTP_FAILED.match(output))


_WORD = re.compile(r"[A-Za-z]+")
_CREATED_WORDS = re.compile(r"(?i)\b(?:created|creation|creating|new|201|generated|granted|acquired|issued|allocated|started|launched)\b")


def creates(tool: str | None, command: str | None, output: str) -> bool:
    """The step makes something new: its verb is a creation verb (``create``, ``run``,
    ``acquire``, ``upload`` …), or a modifying verb's output says ``created``."""
    return _creates(tool, command, output[:2000])


@lru_cache(maxsize=4096)
def _creates(tool: str | None, command: str | None, output: str) -> bool:
    words: list[str] = []
    if command:
        for seg in split_segments(command)[:4]:
            words.extend(w.lower() for x in seg[:4] for w in _WORD.findall(x))
    if tool:
        tool_words = [w.lower() for w in _WORD.findall(tool.replace("_", " "))]
        phrasal = phrasal_verb(tool_words)
        if phrasal is not None:
            return phrasal == "create" or (phrasal == "modify" and bool(_CREATED_WORDS.search(output[:2000])))
        words.extend(tool_words)
    for w in words:
        if w in CREATE_VERBS:
            return True
        if w in MODIFY_VERBS:
            return bool(_CREATED_WORDS.search(output[:2000]))
    return bool(_CREATED_WORDS.search(output[:2000]))


# --------------------------------------------------------------------------- resources

#: Options and keys that scope a command (where it runs, how it prints) rather than name
#: the resource it acts on.
_SCOPE_FLAGS = frozenset(
    """-n --namespace --region --profile --context --project --zone --cluster --kubeconfig -o
    --output --format --bootstrap-server --endpoint-url --endpoint --config --log-level --timeout
    --ttl --limit --page-size --max-items --query --host --port -p --user -u --env""".split()
)
_SCOPE_KEYS = frozenset(
    """region namespace profile project env environment account output format cluster timeout ttl
    ttl_s limit page_size max_results reason description message comment note body text title
    amount currency quantity dry_run""".split()
)
_STOP = frozenset(
    """the and for with from into onto that this then than true false null none json yaml yml text
    table wide all yes default latest main master head origin select where insert update delete set
    values order group limit join left right inner outer having distinct count sum like not null
    returning begin commit rollback transaction table tables index using when case end else exec
    echo grep sort head tail xargs awk sed jq cat less more""".split()
)
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@~+\-]*[A-Za-z0-9]")
#: Verbs (not nouns that tool names also use, such as ``web`` or ``todo``).
_VERBS = CREATE_VERBS | MODIFY_VERBS | frozenset(
    """get list describe show status view read cat inspect query search fetch watch logs log
    history diff check validate wait exec execute invoke call apply""".split()
)


def _name_tokens(text: str, *, verbs: bool = False) -> set[str]:
    """The resource names a command word carries (lower case). ``verbs``: a word that is
    also a verb counts as a name (it stands past the command's sub-command chain:
    ``kubectl get deployment checkout``)."""
    out: set[str] = set()
    for m in _TOKEN.finditer(text):
        t = m.group(0).lower()
        t = re.sub(r"(?:[~^]\d*)+$", "", t)  # HEAD~5 -> head
        if t.startswith("refs/heads/"):
            t = t[len("refs/heads/") :]
        if "=" in t:
            continue
        if t.isdigit():
            if len(t) >= 3:
                out.add(t)
            continue
        if "://" in t:
            scheme, _, rest = t.partition("://")
            if scheme in ("http", "https", "ws", "wss") or "://" in rest:
                continue  # an endpoint of an API, not a resource's name
            t = rest  # docker://reg/repo:tag, s3://bucket/key: the reference names it
        if len(t) < 3 or t in _STOP or (t in _VERBS and not verbs):
            continue
        out.add(t)
        if "/" in t and not t.startswith("/"):  # kind/name -> name
            tail = t.rsplit("/", 1)[-1]
            if len(tail) >= 3 and tail not in _STOP:
                out.add(tail)
    return out


def _json_values(obj: Any, out: list[str]) -> None:
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if str(k).lower() in _SCOPE_KEYS:
                continue
            _json_values(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _json_values(v, out)
    elif isinstance(obj, (str, int)) and not isinstance(obj, bool):
        s = str(obj)
        if len(s) <= 300 and s.count(" ") <= 6:
            out.append(s)


#: Copy commands (``cp``, ``skopeo copy``, ``crane copy``, ``aws s3 cp``): what they change
#: is their destination, the last operand; their sources stay as they were. (``sync`` and
#: ``tag`` are left out: ``argocd app sync NAME``, ``git tag NAME COMMIT`` change their
#: first operand.)
_COPY_PROGRAMS = frozenset("cp scp rsync".split())
_COPY_SUBCOMMANDS = frozenset("cp copy".split())
_REDIRECT = re.compile(r"\d?(?:>|<|&>)")


def _copy_sources(words: list[str]) -> set[int]:
    """Indexes of the source operands of a copy command, whose names are no resource the
    copy changes (PRINCIPLES §2b: a read of a source is no prior state of the copy)."""
    if not words:
        return set()
    head = words[0].rsplit("/", 1)[-1]
    at = 1 if head in _COPY_PROGRAMS else next((i + 1 for i in (1, 2) if i < len(words) and words[i] in _COPY_SUBCOMMANDS), 0)
    if not at:
        return set()
    operands: list[int] = []
    for i in range(at, len(words)):
        if _REDIRECT.match(words[i]):
            break  # a redirection and its file are no operands of the copy
        if not words[i].startswith("-"):
            operands.append(i)
    return set(operands[:-1])


def _command_names(command: str) -> set[str]:
    out: set[str] = set()
    for words in split_segments(command):
        skip = False
        sources = _copy_sources(words)
        for i, w in enumerate(words):
            if skip:
                skip = False
                continue
            if i in sources:
                continue
            if i == 0:
                continue  # the program
            if i == 1 and not w.startswith("-") and "=" not in w and "/" not in w and "." not in w:
                continue  # its sub-command or service (aws acm, gh pr, git rev-parse)
            if w.startswith("-"):
                name, eq, val = w.partition("=")
                if name in _SCOPE_FLAGS:
                    skip = not eq
                    continue
                if eq:
                    out |= _name_tokens(val)
                continue
            if "=" in w and not w.startswith(("/", ".")):
                key, _, val = w.partition("=")
                out |= _name_tokens(key) | _name_tokens(val)
                continue
            # the program, its sub-command and the next word may be verbs (gh pr create,
            # etcdctl lease grant); a word after them names a resource, whatever else it
            # means (a deployment called checkout, a release called release)
            out |= _name_tokens(w, verbs=i >= 3)
    return out


#: Implicit resources: names the command does not spell (the checked-out branch, the
#: state a terraform working directory manages,
#: schema revision of the database a migration tool manages) and files by base name.
def _implicit(domains: Iterable[str]) -> set[str]:
    return {f"@{d}" for d in domains if d in ("git", "db:migrate", "terraform") or d.startswith("file:")}


def link_keys(tool: str | None, command: str | None, args: str, domains: Iterable[str] = ()) -> frozenset[str]:
    """Names of the resources a step touches (lower case), for linking a read with a
    later change of the same resource (PRINCIPLES §2b). Memoised: a history's steps are
    judged again on every lossy request."""
    return _link_keys(tool, command, args, frozenset(domains))


@lru_cache(maxsize=4096)
def _link_keys(tool: str | None, command: str | None, args: str, domains: frozenset[str]) -> frozenset[str]:
    keys = _implicit(domains)
    if command:
        keys |= _command_names(command)
    elif args.strip().startswith(("{", "[")):
        try:
            obj = json.loads(args)
        except ValueError:
            obj = None
        vals: list[str] = []
        _json_values(obj, vals)
        for v in vals:
            keys |= _name_tokens(v)
    elif args:
        keys |= _name_tokens(args)
    if tool and not command:
        nouns = [w for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", tool.rsplit("__", 1)[-1].lower()) if w]
        nouns = [w for w in nouns if w not in _VERBS]
        if nouns and nouns[-1] not in ("file", "files", "dir", "directory", "path", "tool", "command", "shell"):
            keys.add("@tool:" + "_".join(nouns))
    return frozenset(keys)


_HISTORY_WORDS = frozenset({"log", "logs", "history", "reflog", "shortlog", "whatchanged", "events", "audit", "journal", "journalctl"})
#: Words of a call in code that lists a history (``list_repo_commits``, ``get_history``).
_HISTORY_CALL_WORDS = frozenset({"history", "commits", "reflog", "shortlog", "audit"})  # not ``console.log``
_CALL_NAME = re.compile(r"(?<![\w$])([A-Za-z_$][\w$]*)\s*\(")


@lru_cache(maxsize=4096)
def is_history(tool: str | None, command: str | None) -> bool:
    """A read that lists past records (``git log``, ``alembic history``, ``helm
    history``): entries of a history stay valid after a change (PRINCIPLES §3d)."""
    words: list[str] = []
    if command:
        for seg in split_segments(command)[:3]:
            words.extend(w.lower() for w in seg[:3])
    if tool:
        words.extend(w.lower() for w in re.split(r"[_\-.]+", tool))
    if any(w in _HISTORY_WORDS for w in words):
        return True
    # code a command runs (``python -c "…list_repo_commits(…)"``): the calls' words
    calls = _CALL_NAME.findall(command[:4000]) if command and "(" in command else []
    return any(w in _HISTORY_CALL_WORDS for c in calls for w in name_words(c))


# --------------------------------------------------------------------------- around a value

_PRIOR_WORDS = r"previous(?:ly)?|prior|old|before|original(?:ly)?|formerly|former|last known good|rollback target|pre[-_ ]?(?:change|upgrade|reset|deploy|rollout|squash|rebase|switch)|saved"
_NEW_WORDS = re.compile(r"(?i)\b(?:new|now|current(?:ly)?|to|after|next|updated|target)\b")
#: A prior word as a word of its own or as a piece of a key (``previous_offset``,
#: ``oldValue``): no letter or digit glued to it, a case change ending it.
_PRIOR_WORD = r"(?<![A-Za-z0-9])(?i:" + _PRIOR_WORDS + r")(?![a-z0-9])"
_PRIOR_BEFORE = re.compile(r"(?:" + _PRIOR_WORD + r"[\"'\s:=_\-\w.()]*|(?i:\b(?:from|was|were))[\"'\s:=]{1,3})$")
_PRIOR_HEADER = re.compile(_PRIOR_WORD + r"[^\n]*:\s*$")
_ARROW_AFTER = re.compile(r"^\s*(?:->|→|=>|\.\.\.?(?=[0-9a-fA-F])|\s+to\s+\S)")


def prior_marked(text: str, start: int, end: int) -> bool:
    """The text marks the value at ``[start:end]`` as the state *before* a change: a prior
    word earlier on its line with no "new/now/to" word after it (``previous image: X``,
    ``"old_value": X``), the left side of ``X -> Y`` / ``X...Y`` / ``X to Y``, a block
    under a header line with a prior word (``Previous offsets (saved):``), or a column of
    a table whose heading is one (``PRIOR-OFFSET``)."""
    ls = text.rfind("\n", 0, start) + 1
    before = text[ls:start]
    if _ARROW_AFTER.match(text[end : end + 48]):
        return True
    m = _PRIOR_BEFORE.search(before[-80:])
    if m and not _NEW_WORDS.search(before[-80:][m.end() :]):
        return True
    # a header line of the block this line belongs to
    pos = ls
    for _ in range(12):
        if pos <= 0:
            return False
        prev_end = pos - 1
        prev_start = text.rfind("\n", 0, prev_end) + 1
        line = text[prev_start:prev_end]
        if not line.strip():
            return False
        if line.rstrip().endswith(":"):
            return bool(_PRIOR_HEADER.search(line))
        if prev_start == 0 or not text[text.rfind("\n", 0, prev_start - 1) + 1 : prev_start - 1].strip():
            return _prior_column(line, start - ls)  # the first line of the block: a table's heading
        pos = prev_start
    return False


def _prior_column(heading: str, col: int) -> bool:
    """The heading of an aligned table names the column at ``col`` with a prior word."""
    if col >= len(heading) or heading[col].isspace():
        return False
    a = heading.rfind(" ", 0, col) + 1
    z = heading.find(" ", col)
    return bool(re.search(_PRIOR_WORD, heading[a : z if z >= 0 else len(heading)]))


_PREEXISTING = re.compile(
    r"(?i)\b(?:modifying|modifications? complete|still modifying|destroying|destruction complete|"
    r"refreshing state|reading\.\.\.|read complete|unchanged|no changes|already exists|configured|"
    r"updated in-place|update in-place)\b"
)
_CREATED_LINE = re.compile(r"(?i)\b(?:creat(?:ed|ing|ion)|new)\b")


def preexisting_line(text: str, start: int) -> bool:
    """The value's line says it is the id of a resource that already existed (a
    modification or a destruction of it), and not that it was created."""
    ls = text.rfind("\n", 0, start) + 1
    le = text.find("\n", start)
    line = text[ls : le if le >= 0 else len(text)]
    return bool(_PREEXISTING.search(line)) and not _CREATED_LINE.search(line)


_ID_LABEL = re.compile(r"""(?i)(?:^|[\s{,\[])["']?(?:id|uid|name|arn|key|ID|NAME)["']?\s*[:=]\s*["']?$""")


def identity_label(text: str, start: int) -> bool:
    """The value stands under a bare identity key (``"id": …``, ``name=…``, ``arn:``):
    it names the listed entity rather than describing its state."""
    return bool(_ID_LABEL.search(text[max(0, start - 24) : start]))


# --------------------------------------------------------------------------- references

#: Nouns of the scope a new resource is placed in, or of the actor that made it (a VPC, a
#: stack, a project, a bot …): in a creating step's output, an id under such a key names
#: something that existed before the step, not what it made (PRINCIPLES §2a "a handle to
#: what that step made", §3b).
_SCOPE_NOUNS = frozenset(
    """vpc subnet network stack project account org organization tenant workspace team owner
    user bot app application experiment namespace cluster zone region bucket vault parent
    folder channel registry repository repo""".split()
)
_ID_WORDS = frozenset("id ids uuid guid arn identifier".split())
_KEY_BEFORE = re.compile(r"""["']?([A-Za-z][A-Za-z0-9_ .\-]{0,40}?)["']?\s*[:=]\s*["']?$""")
_KEY_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def _label_of(text: str, start: int) -> str | None:
    """The key a value stands under (``"StackId": …``, ``bot_id=…``), or the heading of
    its column in an aligned table (``VPC UUID``)."""
    ls = text.rfind("\n", 0, start) + 1
    m = _KEY_BEFORE.search(text[max(ls, start - 48) : start])
    if m:
        return m.group(1)
    # the first line of the block: a table's heading, cut at runs of two spaces
    pos = ls
    for _ in range(40):
        if pos <= 0:
            break
        prev = text.rfind("\n", 0, pos - 1) + 1
        if not text[prev : pos - 1].strip():
            break
        pos = prev
    if pos == ls:
        return None
    heading = text[pos : text.find("\n", pos)]
    col = start - ls
    if col >= len(heading) or heading[col].isspace():
        return None
    a = heading.rfind("  ", 0, col)
    z = heading.find("  ", col)
    return heading[a + 2 if a >= 0 else 0 : z if z >= 0 else len(heading)].strip() or None


def scope_reference(text: str, start: int, own: frozenset[str]) -> bool:
    """The value at ``start`` is the id of the scope or actor of an entity (under
    ``StackId``, ``bot_id``, ``VPC UUID``), and the step's own words (``own``: what it acts
    on) do not name that noun — ``create-vpc``'s ``VpcId`` is what it made."""
    label = _label_of(text, start)
    if not label:
        return False
    words = [w.lower() for w in _KEY_WORDS.findall(label)]
    if len(words) < 2 or words[-1] not in _ID_WORDS:
        return False
    noun = words[-2]
    return noun in _SCOPE_NOUNS and noun not in own


#: Nouns too general to tell one reference from another (``KmsKeyId``: the KMS is what
#: it names, not a key).
_GENERIC_NOUNS = frozenset("key resource object item entity record external internal".split())
#: Nouns of an entity's own state, not of another entity it refers to (``VersionId``,
#: ``head_commit_id``): what a change of the entity itself moves.
_STATE_NOUNS = frozenset(
    """version revision generation etag sequence seq offset checksum digest hash head current
    latest active deployed live state status target""".split()
)


def reference_nouns(text: str, start: int) -> frozenset[str]:
    """The nouns of the reference a value stands under (``requester_id`` → requester,
    ``KmsKeyId`` → kms, ``RotationLambdaARN`` → rotation, lambda, ``started_by`` →
    started), lower case; empty
    for a bare identity key (``"id": …``), a key of the entity's own state
    (``VersionId``: what a change of the entity moves) or no key at all. A change
    re-points such a reference only by naming it (PRINCIPLES §2b)."""
    label = _label_of(text, start)
    if not label:
        return frozenset()
    words = [w.lower() for w in _KEY_WORDS.findall(label)]
    if len(words) >= 2 and words[-1] == "by":
        # an actor key (``started_by``, ``approvedBy``): the user who did a past act, a
        # reference to another entity
        return frozenset(w for w in words[:-1] if len(w) >= 3 and not w.isdigit())
    if len(words) < 2 or words[-1] not in _ID_WORDS or any(w in _STATE_NOUNS for w in words):
        return frozenset()
    return frozenset(w for w in words[:-1] if len(w) >= 3 and not w.isdigit() and w not in _GENERIC_NOUNS)


#: git commands that write commits or tag objects, or publish them (a push leaves the
#: remote at commits it may never have held): the shas they print are what they made.
_GIT_WRITERS = frozenset(
    """commit merge rebase cherry-pick revert am stash pull push commit-tree tag notes replace
    filter-branch filter-repo fast-import subtree mktag hash-object""".split()
)


@lru_cache(maxsize=1024)
def moves_between_commits(command: str) -> bool:
    """A command line whose git commands write no commit (``bisect``, ``checkout``,
    ``reset``, ``fetch``) and whose other commands change nothing: the commits it
    prints existed before it (PRINCIPLES §2a needs a handle to what the step made; §3d a
    listed commit stays reachable)."""
    gits = 0
    for seg in split_segments(command):
        words = [w for w in seg if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
        if not words:
            continue
        if words[0] == "git":
            sub = next(iter(positional(words[1:], GIT_OPTS_WITH_ARG)), "")
            if sub in _GIT_WRITERS:
                return False
            gits += 1
        elif classify_command(" ".join(words)).mutating is True:
            return False
    return gits > 0


#: Nouns of the call itself: the request, statement or query a step's output is the answer
#: to, and its trace.
_CALL_NOUNS = frozenset("request statement query trace correlation span".split())


def names_the_call(text: str, start: int) -> bool:
    """The value stands under a key naming the call that printed it (``statementHandle``,
    ``request_id``, ``QueryExecutionId`` of a read): the read's own receipt, noise of
    read-only output (PRINCIPLES §3d), no state of what a later change touches."""
    if _CALL_PATH.search(text, max(0, start - 24), start):
        return True  # its status URL: ``/api/v2/statements/<handle>``
    label = _label_of(text, start)
    if not label:
        return False
    words = [w.lower() for w in _KEY_WORDS.findall(label)]
    nouns = [w for w in words[:-1] if w not in ("x", "amzn")]  # x-request-id, x-amzn-trace-id
    # the key names the call alone (``request_id``), not a thing named after one
    # (``saved_query_id``, ``change_request_id``)
    return len(words) >= 2 and words[-1] in (_ID_WORDS | {"handle"}) and len(nouns) == 1 and nouns[0] in _CALL_NOUNS


_CALL_PATH = re.compile(r"/(?:statements|requests|queries|traces)/$")
