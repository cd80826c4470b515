"""Builders of agent task histories and of their compactions, in each agent's wire format.

One place for every test that needs a realistic conversation (DESIGN §8): core tests,
the corpus, and the proxy end-to-end tests.

Build a task history, compact it in an agent's style, render either side in a dialect::

    from tests.support.conversations import build_task, compact, summarization_request

    conv = build_task("migration", seed=3, filler=2)      # a Conversation
    conv.bindings                                          # planted non-regenerable values
    before = conv.to_openai()                              # OpenAI chat body (dict)
    c = compact(conv, "claude_code")                       # benign: summary keeps bindings
    c = compact(conv, "langchain", drop=[conv.binding("prev_revision").value])
    c.expected_verdict, c.dropped                          # ground truth, by construction
    c.before.to_anthropic(), c.after.to_anthropic()        # Anthropic bodies
    c.snapshots("openai")                                  # (Snapshot, Snapshot)
    summarization_request(conv, "codex").to_openai()       # the agent's summarize call

Tasks (:data:`TASKS`): ``migration``, ``upload``, ``git``, ``k8s``, ``terraform``,
``refund``, ``kafka``, ``refactor``. Styles (:data:`STYLES`): ``claude_code``, ``codex``,
``langchain``, ``openhands``, ``aider``, ``letta``, ``cline``, ``goose``, ``truncation``;
plus :data:`MASK_STYLES` (``claude_code_clear``, ``openhands_mask``) that clear old tool
results in place.

Ground truth: every opaque value a task plants is a :class:`Planted` with a stable
``name``, its ``kind`` family and whether it is regenerable. A value is *dropped* by a
compaction iff it sat in the compacted region, the summary leaves it out (``drop``) or
damages it (``alter``), and no kept message repeats it. Mutating tool outputs contain no
opaque token that is not planted, so a summary that keeps every planted binding is safe.

Generation is deterministic for a given ``seed``.
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from proxy.core.dialects import from_anthropic, from_openai_chat
from proxy.core.messages import Snapshot

Dialect = Literal["openai", "anthropic"]
Role = Literal["user", "assistant", "tool"]

# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Turn:
    """One message in a dialect-neutral form.

    ``user``/``assistant`` carry ``text`` (an assistant turn may also carry ``calls``);
    ``tool`` is the result of the call ``call_id`` of tool ``tool_name``.
    """

    role: Role
    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    call_id: str | None = None
    tool_name: str | None = None


@dataclass(frozen=True)
class Planted:
    """An opaque value a task put into the history, with its ground truth.

    ``phrase`` is how a good summary states it (contains the value verbatim), ``vague``
    how a lossy one paraphrases it away.
    """

    name: str
    value: str
    kind: str
    regenerable: bool
    turn: int
    note: str
    phrase: str = ""
    vague: str = ""
    #: Other spellings of the same thing (``deployment/api`` for ``deployment.apps/api``):
    #: the value stays visible while any of them is.
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """A summarisable unit of the history: the turns it spans and a one-line recap."""

    first: int
    last: int
    recap: str
    binds: tuple[str, ...] = ()  # names of planted values this step produced


@dataclass(frozen=True)
class Conversation:
    task: str
    system: str
    turns: tuple[Turn, ...]
    planted: tuple[Planted, ...] = ()
    steps: tuple[Step, ...] = ()
    goal: str = ""
    next_step: str = ""
    tools: tuple[Mapping[str, Any], ...] = ()
    #: Anthropic ``metadata`` (Claude Code sends ``user_id`` with a session suffix).
    metadata: Mapping[str, Any] | None = None
    model: str = "gpt-4o"

    # ---- ground truth

    @property
    def bindings(self) -> tuple[Planted, ...]:
        """Planted non-regenerable values (the ones a later step needs verbatim)."""
        return tuple(p for p in self.planted if not p.regenerable)

    @property
    def regenerable(self) -> tuple[Planted, ...]:
        return tuple(p for p in self.planted if p.regenerable)

    def binding(self, name: str) -> Planted:
        for p in self.planted:
            if p.name == name:
                return p
        raise KeyError(name)

    def first_binding_step(self) -> int:
        """Turn index of the first tool call whose result plants a binding (everything
        before it can be cut without losing a binding)."""
        for st in self.steps:
            if any(not p.regenerable for p in self.planted if p.name in st.binds):
                return st.first
        return len(self.turns)

    def text_of(self, turns: Iterable[int] | None = None) -> str:
        idx = range(len(self.turns)) if turns is None else turns
        out = [self.system]
        for i in idx:
            t = self.turns[i]
            out.append(t.text)
            out.extend(json.dumps(c.arguments) for c in t.calls)
        return "\n".join(out)

    # ---- building

    def then(self, *turns: Turn) -> Conversation:
        """The same conversation with turns appended (an ``append`` transition)."""
        return replace(self, turns=self.turns + tuple(turns))

    def with_turns(self, turns: Sequence[Turn], **changes: Any) -> Conversation:
        return replace(self, turns=tuple(turns), **changes)

    # ---- rendering

    def to_openai(self, model: str | None = None) -> dict[str, Any]:
        """An OpenAI chat-completions body."""
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self.system}] if self.system else []
        for t in self.turns:
            if t.role == "tool":
                msgs.append({"role": "tool", "tool_call_id": t.call_id, "content": t.text})
            elif t.role == "assistant":
                m: dict[str, Any] = {"role": "assistant", "content": t.text or None}
                if t.calls:
                    m["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                        }
                        for c in t.calls
                    ]
                msgs.append(m)
            else:
                msgs.append({"role": "user", "content": t.text})
        body: dict[str, Any] = {"model": model or self.model, "messages": msgs}
        if self.tools:
            body["tools"] = [{"type": "function", "function": dict(f)} for f in self.tools]
        return body

    def to_anthropic(self, model: str = "claude-haiku-4-5") -> dict[str, Any]:
        """An Anthropic messages body (consecutive same-role turns merged into one message,
        tool results as ``tool_result`` blocks in user messages)."""
        msgs: list[dict[str, Any]] = []
        for t in self.turns:
            if t.role == "tool":
                role, blocks = "user", [{"type": "tool_result", "tool_use_id": t.call_id, "content": t.text}]
            elif t.role == "assistant":
                role = "assistant"
                blocks = [{"type": "text", "text": t.text}] if t.text else []
                blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)} for c in t.calls]
            else:
                role, blocks = "user", [{"type": "text", "text": t.text}]
            if msgs and msgs[-1]["role"] == role:
                msgs[-1]["content"].extend(blocks)
            else:
                msgs.append({"role": role, "content": blocks})
        body: dict[str, Any] = {"model": model, "max_tokens": 4096, "messages": msgs}
        if self.system:
            body["system"] = self.system
        if self.tools:
            body["tools"] = [
                {"name": f["name"], "description": f.get("description", ""), "input_schema": f.get("parameters", {})}
                for f in self.tools
            ]
        if self.metadata:
            body["metadata"] = dict(self.metadata)
        return body

    def to_responses(self, model: str = "gpt-5-codex") -> dict[str, Any]:
        """An OpenAI Responses API body: ``instructions`` and ``input`` items (messages,
        ``function_call`` and ``function_call_output``), as Codex sends it."""
        items: list[dict[str, Any]] = []
        for t in self.turns:
            if t.role == "tool":
                items.append({"type": "function_call_output", "call_id": t.call_id, "output": t.text})
                continue
            if t.text:
                kind = "input_text" if t.role == "user" else "output_text"
                items.append({"type": "message", "role": t.role, "content": [{"type": kind, "text": t.text}]})
            for c in t.calls:
                items.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(c.arguments)})
        body: dict[str, Any] = {"model": model, "input": items}
        if self.system:
            body["instructions"] = self.system
        if self.tools:
            body["tools"] = [{"type": "function", **dict(f)} for f in self.tools]
        return body

    def body(self, dialect: str) -> dict[str, Any]:
        if dialect == "responses":
            return self.to_responses()
        return self.to_openai() if dialect == "openai" else self.to_anthropic()

    def snapshot(self, dialect: str = "openai") -> Snapshot:
        from proxy.core.dialects import from_openai_responses

        if dialect == "responses":
            return from_openai_responses(self.to_responses())
        return from_openai_chat(self.to_openai()) if dialect == "openai" else from_anthropic(self.to_anthropic())


BASH_TOOL: Mapping[str, Any] = {
    "name": "bash",
    "description": "Run a shell command in the workspace and return its output.",
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command line to run."}},
        "required": ["command"],
    },
}

SYSTEM_PROMPT = (
    "You are a careful operations and software engineering agent. You work in the user's "
    "workspace through the bash tool. Before any change that is hard to undo, record what "
    "you need to undo it."
)

# --------------------------------------------------------------------------- values


class Ids:
    """Deterministic random identifiers (each contains a digit and a letter)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def _mixed(self, alphabet: str, n: int) -> str:
        while True:
            s = "".join(self.rng.choice(alphabet) for _ in range(n))
            if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
                return s

    def hex(self, n: int) -> str:
        return self._mixed("0123456789abcdef", n)

    def alnum(self, n: int, upper: bool = False) -> str:
        letters = string.ascii_uppercase if upper else string.ascii_letters
        return self._mixed(letters + string.digits, n)

    def b64ish(self, n: int) -> str:
        return self._mixed(string.ascii_letters + string.digits + "._", n).strip("._") + self.alnum(2)

    def uuid(self) -> str:
        h = self.hex(32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, seq: Sequence[Any]) -> Any:
        return self.rng.choice(list(seq))


# --------------------------------------------------------------------------- task builder


class _Builder:
    def __init__(self, task: str, seed: int) -> None:
        self.task = task
        self.rng = random.Random(f"{task}:{seed}")
        self.ids = Ids(self.rng)
        self.turns: list[Turn] = []
        self.planted: list[Planted] = []
        self.steps: list[Step] = []
        self._calls = 0

    def user(self, text: str) -> None:
        self.turns.append(Turn("user", text))

    def say(self, text: str) -> None:
        self.turns.append(Turn("assistant", text))

    def run(
        self,
        command: str,
        output: str,
        *,
        recap: str,
        say: str = "",
        binds: Sequence[tuple[str, str, str, str, str, str]] = (),
        regen: Sequence[tuple[str, str, str]] = (),
        aliases: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        """One bash call and its result. ``binds``: (name, value, kind, note, phrase,
        vague) of non-regenerable values in the output; ``regen``: (name, value, kind) of
        regenerable ones."""
        self._calls += 1
        cid = f"call_{self.ids.alnum(20)}"
        first = len(self.turns)
        self.turns.append(Turn("assistant", say, calls=(ToolCall(cid, "bash", {"command": command}),)))
        self.turns.append(Turn("tool", output, call_id=cid, tool_name="bash"))
        names = []
        for name, value, kind, note, phrase, vague in binds:
            assert value in output, (name, value)
            if not any(p.name == name for p in self.planted):
                self.planted.append(
                    Planted(name, value, kind, False, first + 1, note, phrase, vague, (aliases or {}).get(name, ()))
                )
            names.append(name)
        for name, value, kind in regen:
            assert value in output, (name, value)
            if not any(p.value == value for p in self.planted):
                self.planted.append(Planted(name, value, kind, True, first + 1, "listed by a read-only command"))
        self.steps.append(Step(first, first + 1, recap, tuple(names)))

    def build(self, goal: str, next_step: str) -> Conversation:
        return Conversation(
            task=self.task,
            system=SYSTEM_PROMPT,
            turns=tuple(self.turns),
            planted=tuple(self.planted),
            steps=tuple(self.steps),
            goal=goal,
            next_step=next_step,
            tools=(BASH_TOOL,),
        )

    # ---- noise: read-only steps whose values are regenerable (locators, prose, dates)

    def filler(self, n: int, late: bool = False) -> None:
        for _ in range(n):
            kind = self.rng.randrange(6 if late else 4)
            if kind == 0:
                d = self.ids.pick(["src", "app", "lib", "scripts", "docs"])
                files = [f"{d}/{w}_{self.ids.pick(['util', 'core', 'io', 'view', 'model'])}.py" for w in self.rng.sample(["order", "invoice", "user", "cart", "tax", "report", "auth", "mail"], 4)]
                out = "\n".join(f"-rw-r--r--  1 dev staff  {self.ids.int(300, 9000):>5} Jun {self.ids.int(1, 28):>2} 10:{self.ids.int(10, 59)} {f}" for f in files)
                self.run(f"ls -la {d}/", out, recap=f"listed {d}/", regen=[(f"ls:{f}", f, "path") for f in files])
            elif kind == 1:
                url = f"https://wiki.acme.io/runbooks/{self.task}-{self.ids.pick(['rollback', 'oncall', 'checklist'])}"
                out = (
                    f"# Runbook ({self.task})\nLast reviewed 2024-05-{self.ids.int(10, 28)} by the platform team.\n"
                    f"Follow the checklist at {url} before any production change.\n"
                    "Always note what you need to undo a step before you take it."
                )
                self.run("cat docs/RUNBOOK.md", out, recap="read the runbook", regen=[("runbook_url", url, "url")])
            elif kind == 2:
                v = f"{self.ids.int(1, 3)}.{self.ids.int(0, 12)}.{self.ids.int(0, 9)}"
                self.run(
                    "python --version && pip --version",
                    f"Python 3.11.{self.ids.int(1, 9)}\npip 24.{self.ids.int(0, 2)} from /usr/lib/python3/site-packages/pip (python 3.11)\nclient library version {v}",
                    recap="checked tool versions",
                )
            elif kind == 3:
                self.run(
                    "date -u && uptime",
                    f"Tue Jun 11 0{self.ids.int(1, 9)}:{self.ids.int(10, 59)}:{self.ids.int(10, 59)} UTC 2024\n"
                    f" 09:{self.ids.int(10, 59)}:01 up {self.ids.int(2, 90)} days,  3 users,  load average: 0.{self.ids.int(10, 99)}, 0.42, 0.37",
                    recap="checked the time",
                )
            elif kind == 4:
                rid = self.ids.uuid()
                out = (
                    f"2024-06-11T09:{self.ids.int(10, 59)}:02Z INFO request_id={rid} GET /healthz 200 3ms\n"
                    f"2024-06-11T09:{self.ids.int(10, 59)}:07Z INFO GET /metrics 200 5ms"
                )
                self.run("tail -n 2 /var/log/app/access.log", out, recap="read the access log", regen=[(f"log:{rid}", rid, "uuid")])
            else:
                pods = [f"worker-{self.ids.hex(10)}-{self.ids.alnum(5).lower()}" for _ in range(2)]
                out = "NAME                             READY   STATUS    RESTARTS   AGE\n" + "\n".join(
                    f"{p}   1/1     Running   0          {self.ids.int(2, 50)}m" for p in pods
                )
                self.run("kubectl -n tools get pods", out, recap="listed the tool pods", regen=[(f"pod:{p}", p, "k8s_pod") for p in pods])


# ---- the eight tasks ------------------------------------------------------------------

GIT_CTX = "git"


def _migration(b: _Builder, filler: int) -> Conversation:
    prev, new, old1, old2 = b.ids.hex(12), b.ids.hex(12), b.ids.hex(12), b.ids.hex(12)
    path = f"/srv/shop/migrations/versions/{new}_add_order_status.py"
    b.user(
        "Add a `status` column to the `orders` table with an Alembic migration, apply it to staging, "
        "and roll back if the smoke tests fail. Keep track of the revisions so we can downgrade."
    )
    b.filler(filler)
    b.run(
        "ls migrations/versions",
        f"{old1}_create_orders.py\n{old2}_add_customer_email.py\n__init__.py",
        recap="listed the existing migrations",
        regen=[("old_migration_1", f"{old1}_create_orders.py", "path"), ("old_migration_2", f"{old2}_add_customer_email.py", "path")],
    )
    b.run(
        "alembic current",
        "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.\n"
        "INFO  [alembic.runtime.migration] Will assume transactional DDL.\n"
        f"{prev} (head)",
        say="First I record the current revision.",
        recap="recorded the current Alembic revision",
        binds=[("prev_revision", prev, "alembic_revision", "revision before the upgrade: the downgrade target",
                f"the database was at revision {prev} before the upgrade (downgrade target)",
                "the database was at the previous revision before the upgrade")],
    )
    b.run(
        'alembic revision -m "add order status"',
        f"Generating {path} ...  done",
        recap="generated the migration file",
        binds=[("migration_path", path, "path", "the new migration file",
                f"the migration file is {path}", "the migration file was generated")],
    )
    b.run(
        "alembic upgrade head",
        "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.\n"
        "INFO  [alembic.runtime.migration] Will assume transactional DDL.\n"
        f"INFO  [alembic.runtime.migration] Running upgrade {prev} -> {new}, add order status",
        say="Applying it to staging.",
        recap="applied the migration to staging",
        binds=[
            ("prev_revision", prev, "alembic_revision", "", "", ""),
            ("new_revision", new, "alembic_revision", "revision created and applied",
             f"the new head is revision {new}", "the new revision is now head"),
        ],
    )
    b.run(
        "pytest tests/smoke -q",
        "....F.......\nFAILED tests/smoke/test_orders.py::test_list_orders - AssertionError: 500 != 200\n1 failed, 11 passed in 3.42s",
        recap="ran the smoke tests: test_list_orders failed",
    )
    b.say("The smoke test `test_list_orders` failed. Before rolling back I will check the application logs.")
    b.filler(filler, late=True)
    return b.build(
        "add orders.status via Alembic on staging, roll back if smoke tests fail",
        "check the logs, then downgrade to the previous revision if the failure is caused by the migration",
    )


def _upload(b: _Builder, filler: int) -> Conversation:
    up = b.ids.b64ish(64)
    e1, e2 = b.ids.hex(32), b.ids.hex(32)
    key = f"nightly/orders-{b.ids.hex(8)}.dump"
    b.user(
        "Upload tonight's database dump to the acme-db-backups bucket as a multipart upload. "
        "If it fails midway, resume it rather than starting over."
    )
    b.filler(filler)
    b.run(
        "ls -lh /backups/pg/",
        f"-rw-r----- 1 postgres postgres 18G Jun 11 02:14 /backups/pg/{key.split('/')[1]}\n"
        "-rw-r----- 1 postgres postgres 17G Jun 10 02:13 /backups/pg/previous.dump",
        recap="found the dump file",
        regen=[("dump_file", f"/backups/pg/{key.split('/')[1]}", "path")],
    )
    b.run(
        f"aws s3api create-multipart-upload --bucket acme-db-backups --key {key}",
        json.dumps({"ServerSideEncryption": "AES256", "Bucket": "acme-db-backups", "Key": key, "UploadId": up}, indent=4),
        say="Starting the multipart upload.",
        recap="created the multipart upload",
        binds=[
            ("upload_id", up, "upload_id", "the multipart upload id (needed to resume or complete)",
             f"the multipart upload id is {up}", "a multipart upload was created"),
        ],
        # the object key is the agent's own name for the dump: an echo (PRINCIPLES §3b)
        regen=[("object_key", key, "path")],
    )
    for n, etag in ((1, e1), (2, e2)):
        b.run(
            f"aws s3api upload-part --bucket acme-db-backups --key {key} --part-number {n} --body /tmp/parts/part-00{n} --upload-id {up}",
            json.dumps({"ServerSideEncryption": "AES256", "ETag": f'"{etag}"'}, indent=4),
            recap=f"uploaded part {n}",
            binds=[(f"etag_{n}", etag, "hex_digest", f"ETag of part {n} (needed to complete)",
                    f"part {n} has ETag {etag}", f"part {n} was uploaded")],
        )
    b.run(
        f"aws s3api upload-part --bucket acme-db-backups --key {key} --part-number 3 --body /tmp/parts/part-003 --upload-id {up}",
        "An error occurred (RequestTimeout) when calling the UploadPart operation: Your socket connection to the "
        "server was not read from or written to within the timeout period.",
        recap="part 3 timed out",
    )
    b.say("Part 3 timed out; parts 1 and 2 are uploaded. I will check the network and retry part 3.")
    b.filler(filler, late=True)
    return b.build(
        "multipart upload of the nightly dump to acme-db-backups, resumable",
        "retry part 3 with the same upload id, then complete the upload with the part ETags",
    )


def _git(b: _Builder, filler: int) -> Conversation:
    head = b.ids.hex(40)
    new = b.ids.hex(40)
    shas = [b.ids.hex(7) for _ in range(4)]
    b.user(
        "Squash the last three commits on feature/payments into one and rebase onto main. "
        "Keep a way back in case the rebase goes wrong."
    )
    b.filler(filler)
    b.run(
        "git status --short --branch",
        "## feature/payments...origin/feature/payments\n M README.md",
        recap="checked the working tree",
    )
    b.run(
        "git rev-parse HEAD",
        head,
        say="Recording the current HEAD before rewriting history.",
        recap="recorded HEAD before the rebase",
        binds=[("head_before", head, "git_sha", "HEAD before the rebase: the reset target",
                f"HEAD before the rebase was {head}", "HEAD before the rebase was recorded")],
    )
    b.run(
        "git rebase -i --autosquash main",
        "Successfully rebased and updated refs/heads/feature/payments.",
        recap="squashed and rebased onto main",
    )
    b.run(
        "git push --force-with-lease origin feature/payments",
        f"To github.com:acme/shop.git\n + {head[:7]}...{new[:7]} feature/payments -> feature/payments (forced update)",
        recap="force-pushed the branch",
        binds=[
            ("head_before_short", head[:7], "git_sha", "short form of HEAD before", "", ""),
            ("head_after_short", new[:7], "git_sha", "the pushed commit",
             f"the pushed commit is {new[:7]}", "the branch was force-pushed"),
        ],
    )
    b.say("The branch is rewritten and pushed. CI is running on the new commit.")
    b.filler(filler, late=True)
    del shas
    return b.build(
        "squash the last three commits on feature/payments and rebase onto main, reversibly",
        "wait for CI; if it fails, reset the branch to the HEAD recorded before the rebase",
    )


def _k8s(b: _Builder, filler: int) -> Conversation:
    digest = b.ids.hex(64)
    image = f"registry.acme.io/shop/api@sha256:{digest}"
    b.user(
        "Roll out api v2.14.0 to production (deployment api in namespace shop). If error rates climb, "
        "roll back to exactly the image that is running now."
    )
    b.filler(filler)
    b.run(
        "kubectl -n shop get deployment api -o jsonpath='{.spec.template.spec.containers[0].image}'",
        image,
        say="Recording the image that runs now.",
        recap="recorded the running image",
        binds=[("image_before", image, "oci_image", "the image before the rollout: the rollback target",
                f"the image before the rollout was {image}", "the previous image was recorded")],
    )
    b.run(
        "kubectl -n shop set image deployment/api api=registry.acme.io/shop/api:v2.14.0",
        "deployment.apps/api image updated",
        recap="updated the image to v2.14.0",
        # the deployment's name comes from the task: derivable (PRINCIPLES §3b)
        regen=[("deployment", "deployment.apps/api", "k8s_resource")],
    )
    b.run(
        "kubectl -n shop rollout status deployment/api --timeout=120s",
        'Waiting for deployment "api" rollout to finish: 2 of 4 updated replicas are available...\n'
        'deployment "api" successfully rolled out',
        recap="the rollout finished",
    )
    b.say("v2.14.0 is rolled out. I will watch the error rate for ten minutes.")
    b.filler(filler, late=True)
    return b.build(
        "roll out api v2.14.0 in namespace shop, reversible to the exact previous image",
        "watch error rates; if they climb, set the image back to the recorded previous image",
    )


def _terraform(b: _Builder, filler: int) -> Conversation:
    snap = f"orders-prod-pre-resize-{b.ids.hex(6)}"
    arn = f"arn:aws:rds:eu-west-1:123456789012:snapshot:{snap}"
    dbi = "db-" + b.ids.alnum(26, upper=True)
    b.user(
        "Apply the RDS instance class change in infra/prod (db.r6g.large to db.r6g.xlarge). "
        "Take a snapshot first so we can restore if anything breaks."
    )
    b.filler(filler)
    b.run(
        "aws rds create-db-snapshot --db-instance-identifier orders-prod "
        f"--db-snapshot-identifier {snap}",
        json.dumps({"DBSnapshot": {"DBSnapshotArn": arn, "Status": "creating", "PercentProgress": 0}}, indent=4),
        say="Taking the snapshot first.",
        recap="took a pre-change snapshot",
        binds=[("snapshot_arn", arn, "aws_arn", "the pre-change snapshot: the restore point",
                f"the restore snapshot is {arn}", "a snapshot was taken")],
    )
    b.run(
        "terraform -chdir=infra/prod apply -auto-approve",
        f"aws_db_instance.orders: Modifying... [id={dbi}]\n"
        f"aws_db_instance.orders: Still modifying... [id={dbi}, 10m0s elapsed]\n"
        f"aws_db_instance.orders: Modifications complete after 12m41s [id={dbi}]\n\n"
        "Apply complete! Resources: 0 added, 1 changed, 0 destroyed.",
        recap="applied the change",
        # a configuration address and the id of an instance that already existed
        # (PRINCIPLES §3b, §3c): neither was minted by the apply
        regen=[("tf_address", "aws_db_instance.orders", "terraform_address"), ("db_resource_id", dbi, "aws_resource_id")],
    )
    b.say("The instance class change is applied. I will watch replication lag and error rates.")
    b.filler(filler, late=True)
    return b.build(
        "resize the orders RDS instance with terraform, with a restore point",
        "watch the database; if anything breaks, restore from the pre-change snapshot",
    )


def _refund(b: _Builder, filler: int) -> Conversation:
    cus = "cus_" + b.ids.alnum(14)
    pi = "pi_" + b.ids.alnum(24)
    ch = "ch_" + b.ids.alnum(24)
    re_ = "re_" + b.ids.alnum(24)
    b.user(f"Customer {cus} was charged twice for order 88231. Refund the duplicate charge of 49.99 EUR and confirm it went through.")
    b.filler(filler)
    b.run(
        f"stripe refunds create --payment-intent {pi} --amount 4999 --reason duplicate",
        json.dumps({"id": re_, "object": "refund", "amount": 4999, "charge": ch, "currency": "eur",
                    "payment_intent": pi, "reason": "duplicate", "status": "pending"}, indent=2),
        say="The second payment is the duplicate; refunding it.",
        recap="created the refund",
        binds=[
            ("refund_id", re_, "stripe_id", "the refund created", f"the refund is {re_}", "a refund was created"),
            ("charge_id", ch, "stripe_id", "the refunded charge", f"it refunds charge {ch}", "it refunds the duplicate charge"),
            ("payment_intent", pi, "stripe_id", "the duplicate payment", f"of payment {pi}", "of the duplicate payment"),
        ],
    )
    b.say("The refund is pending. I will check its status in a minute.")
    b.filler(filler, late=True)
    return b.build(
        "refund the duplicate charge of order 88231",
        "check the refund status; do not create a second refund",
    )


def _kafka(b: _Builder, filler: int) -> Conversation:
    cur = [b.ids.int(1_700_000, 1_900_000) for _ in range(3)]
    new = [c - b.ids.int(20_000, 60_000) for c in cur]
    header = "GROUP            TOPIC     PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG"
    rows = "\n".join(f"billing-consumer invoices  {p}          {c}         {c + 40}         40" for p, c in enumerate(cur))
    b.user(
        "Consumer group billing-consumer double-processed invoices after the deploy. Rewind it on topic invoices "
        "to 2024-06-11T08:00:00Z, but record the current offsets first so we can move it back."
    )
    b.filler(filler)
    b.run(
        "kafka-consumer-groups.sh --bootstrap-server kafka-1:9092 --describe --group billing-consumer",
        f"{header}\n{rows}",
        say="Recording the current offsets.",
        recap="recorded the current offsets",
        binds=[(f"offset_before_{p}", str(c), "kafka_offset",
                f"offset of invoices partition {p} before the reset",
                f"before the reset topic invoices partition {p} offset {c}",
                f"partition {p} was at its previous offset") for p, c in enumerate(cur)],
    )
    rows2 = "\n".join(f"billing-consumer invoices  {p}          {n}" for p, n in enumerate(new))
    b.run(
        "kafka-consumer-groups.sh --bootstrap-server kafka-1:9092 --group billing-consumer --topic invoices "
        "--reset-offsets --to-datetime 2024-06-11T08:00:00.000 --execute",
        f"GROUP            TOPIC     PARTITION  NEW-OFFSET\n{rows2}",
        recap="reset the offsets to 08:00",
        # the new offsets are the current state, read again by --describe (PRINCIPLES §3c)
        regen=[(f"offset_after_{p}", str(n), "kafka_offset") for p, n in enumerate(new)],
    )
    b.say("Offsets are rewound. The consumers will reprocess from 08:00; I will watch for duplicates.")
    b.filler(filler, late=True)
    return b.build(
        "rewind billing-consumer on invoices to 08:00, reversibly",
        "watch reprocessing; if it goes wrong, reset each partition back to its recorded offset",
    )


def _refactor(b: _Builder, filler: int) -> Conversation:
    sha = b.ids.hex(7)
    old, new = "src/payments/legacy_client.py", "src/payments/client.py"
    b.user(
        "Rename the legacy payment client module to payments/client.py and update the imports. "
        "Commit a checkpoint before you start so we can get back."
    )
    b.filler(filler)
    b.run(
        "rg -l legacy_client src/",
        "src/payments/api.py\nsrc/payments/webhooks.py\nsrc/payments/legacy_client.py",
        recap="found the importers",
        regen=[("importer_api", "src/payments/api.py", "path"), ("importer_webhooks", "src/payments/webhooks.py", "path")],
    )
    b.run(
        'git commit -am "wip: checkpoint before client rename"',
        f"[main {sha}] wip: checkpoint before client rename\n 3 files changed, 41 insertions(+), 7 deletions(-)",
        say="Committing a checkpoint first.",
        recap="committed a checkpoint",
        binds=[("checkpoint_sha", sha, "git_sha", "the checkpoint commit: the reset target",
                f"the checkpoint commit is {sha}", "a checkpoint commit was made")],
    )
    b.run(
        f"git mv -v {old} {new}",
        f"Renaming {old} to {new}",
        recap="moved the module",
        # both paths are names the task gave (PRINCIPLES §3b)
        regen=[("old_path", old, "path"), ("new_path", new, "path")],
    )
    b.run(
        "pytest -q tests/payments",
        "......................F\nFAILED tests/payments/test_webhooks.py::test_signature - ImportError\n1 failed, 22 passed in 1.92s",
        recap="ran the payment tests: an import is still broken",
    )
    b.say("One import in the webhooks is still broken. I will fix it next.")
    b.filler(filler, late=True)
    return b.build(
        "rename the legacy payment client module and fix imports, with a checkpoint",
        "fix the remaining import; if the refactor goes wrong, reset to the checkpoint commit",
    )


TASK_BUILDERS: dict[str, Callable[[_Builder, int], Conversation]] = {
    "migration": _migration,
    "upload": _upload,
    "git": _git,
    "k8s": _k8s,
    "terraform": _terraform,
    "refund": _refund,
    "kafka": _kafka,
    "refactor": _refactor,
}
TASKS: tuple[str, ...] = tuple(TASK_BUILDERS)


def build_task(task: str, *, seed: int = 0, filler: int = 0) -> Conversation:
    """A task history: the user's goal, read-only and mutating bash steps whose outputs
    plant the values listed in :attr:`Conversation.planted`, and ``filler`` read-only
    noise steps before the work and after it."""
    return TASK_BUILDERS[task](_Builder(task, seed), filler)


# --------------------------------------------------------------------------- summaries


def write_summary(
    conv: Conversation,
    turns: Iterable[int],
    *,
    drop: Iterable[str] = (),
    alter: Mapping[str, str] | None = None,
    header: str = "",
) -> str:
    """A summary of ``turns`` in the style of a good engineer's hand-off note: the goal,
    each step's recap with its bindings stated verbatim — except values in ``drop``
    (paraphrased away) and in ``alter`` (written in a damaged form)."""
    span = set(turns)
    drop_set, alter = set(drop), dict(alter or {})
    by_name = {p.name: p for p in conv.planted}
    lines = [header] if header else []
    lines.append(f"Goal: {conv.goal}.")
    lines.append("Progress so far:")
    stated: set[str] = set()
    for st in conv.steps:
        if st.first not in span and st.last not in span:
            continue
        parts = [st.recap]
        for name in st.binds:
            p = by_name[name]
            if not p.phrase or name in stated:
                continue
            stated.add(name)
            if p.value in alter:
                parts.append(p.phrase.replace(p.value, alter[p.value]))
            elif p.value in drop_set:
                parts.append(p.vague)
            else:
                parts.append(p.phrase)
        lines.append("- " + "; ".join(parts) + ".")
    lines.append(f"Next: {conv.next_step}.")
    return "\n".join(lines)


# --------------------------------------------------------------------------- compaction

STYLES: tuple[str, ...] = ("claude_code", "codex", "langchain", "openhands", "aider", "letta", "cline", "goose", "truncation")
MASK_STYLES: tuple[str, ...] = ("claude_code_clear", "openhands_mask")

CLAUDE_CODE_CONTINUATION = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\n"
)
CLAUDE_CODE_TAIL = (
    "\nPlease continue the conversation from where we left it off without asking the user any further "
    "questions. Continue with the last task that you were asked to work on."
)
CODEX_CONTINUATION = (
    "Another language model started to solve this problem and produced a summary of its thinking process. "
    "You also have access to the state of the tools that were used by that language model. Use this to build "
    "on the work that has already been done and avoid duplicating work. Here is the summary produced by the "
    "other language model, use the information in this summary to assist with your own analysis:\n"
)
LANGCHAIN_CONTINUATION = "Here is a summary of the conversation to date:\n\n"
AIDER_CONTINUATION = "I spoke to you previously about a number of things.\n"
CLEARED = "[Old tool result content cleared]"
MASKED = "<MASKED>"


@dataclass(frozen=True)
class Compaction:
    """A before/after pair with its ground truth."""

    style: str
    before: Conversation
    after: Conversation
    #: Planted non-regenerable values no longer visible verbatim after the compaction.
    dropped: frozenset[str]
    #: Of those, the ones still visible in a damaged form.
    altered: frozenset[str] = frozenset()
    #: Planted regenerable values that disappeared (never make a compaction destructive).
    dropped_regenerable: frozenset[str] = frozenset()
    compacted_turns: tuple[int, ...] = ()

    @property
    def expected_verdict(self) -> str:
        return "destructive" if self.dropped else "safe"

    def bodies(self, dialect: Dialect) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.before.body(dialect), self.after.body(dialect)

    def snapshots(self, dialect: Dialect = "openai") -> tuple[Snapshot, Snapshot]:
        return self.before.snapshot(dialect), self.after.snapshot(dialect)


def _visible(value: str, text: str) -> bool:
    """Verbatim occurrence not glued to a letter or digit (what the ground truth means by
    'still visible')."""
    for m in re.finditer(re.escape(value), text):
        a, z = m.start(), m.end()
        if (a == 0 or not text[a - 1].isalnum()) and (z == len(text) or not text[z].isalnum()):
            return True
    return False


def _tail_start(conv: Conversation, keep_last: int, floor: int = 0) -> int:
    """Index where a kept tail of about ``keep_last`` turns starts, moved back so it never
    starts with a tool result (tool-call pairing is kept, as agents do)."""
    start = max(floor, len(conv.turns) - keep_last)
    while floor < start < len(conv.turns) and conv.turns[start].role == "tool":
        start -= 1
    return start


def _truth(before: Conversation, after: Conversation, alter: Mapping[str, str], compacted: Sequence[int]) -> Compaction:
    text = after.text_of()
    gone = frozenset(
        p.value for p in before.bindings if not any(_visible(v, text) for v in (p.value,) + p.aliases)
    )
    # a short SHA survives when its full SHA is visible (prefix alias)
    gone = frozenset(v for v in gone if not re.search(r"(?<![0-9a-fA-F])" + re.escape(v) + r"[0-9a-fA-F]+", text))
    regen_gone = frozenset(p.value for p in before.regenerable if not _visible(p.value, text))
    return Compaction(
        style="",
        before=before,
        after=after,
        dropped=gone,
        altered=frozenset(v for v in gone if v in alter),
        dropped_regenerable=regen_gone,
        compacted_turns=tuple(compacted),
    )


def compact(
    conv: Conversation,
    style: str,
    *,
    keep_last: int | None = None,
    drop: Iterable[str] | Literal["all"] = (),
    alter: Mapping[str, str] | None = None,
    mask_kept: bool = False,
) -> Compaction:
    """Compact ``conv`` the way agent ``style`` does.

    ``keep_last``: turns kept verbatim at the end (style default if ``None``).
    ``drop``: planted values the summary leaves out (``"all"``: every binding); default
    ``()`` — a benign compaction whose summary keeps every binding verbatim.
    ``alter``: value → damaged form written in the summary instead (a truncated SHA …).
    ``mask_kept``: also clear the tool results of the kept tail (except the last one).
    For ``truncation`` there is no summary: what is cut is gone.
    """
    alter = dict(alter or {})
    drop_set = {p.value for p in conv.bindings} if drop == "all" else set(drop)
    n = len(conv.turns)
    defaults = {"claude_code": 0, "codex": 0, "langchain": 6, "openhands": 4, "aider": 4, "letta": 4,
                "cline": 0, "goose": 2, "truncation": 6, "claude_code_clear": 4, "openhands_mask": 4}
    if style not in defaults:
        raise ValueError(f"unknown style {style!r}; known: {', '.join(STYLES + MASK_STYLES)}")
    k = defaults[style] if keep_last is None else keep_last

    if style in MASK_STYLES:
        placeholder = CLEARED if style == "claude_code_clear" else MASKED
        cut = _tail_start(conv, k)
        turns = [
            replace(t, text=placeholder) if t.role == "tool" and i < cut else t
            for i, t in enumerate(conv.turns)
        ]
        after = conv.with_turns(turns)
        c = _truth(conv, after, alter, [i for i in range(cut) if conv.turns[i].role == "tool"])
        return replace(c, style=style)

    floor = 1 if style in ("openhands", "cline") else 0
    start = _tail_start(conv, k, floor=floor)
    if style == "codex":
        start = n if k == 0 else start
    span = list(range(floor, start))
    tail = list(conv.turns[start:])
    if mask_kept:
        last_tool = max((i for i, t in enumerate(tail) if t.role == "tool"), default=-1)
        tail = [replace(t, text=CLEARED) if t.role == "tool" and i != last_tool else t for i, t in enumerate(tail)]
    summary = write_summary(conv, span, drop=drop_set, alter=alter)
    first = conv.turns[0]
    n_lost = len(span)

    if style == "claude_code":
        last_user = next((t for t in reversed(conv.turns) if t.role == "user"), first)
        turns = [Turn("user", CLAUDE_CODE_CONTINUATION + summary + CLAUDE_CODE_TAIL)] + tail
        if not tail:
            turns.append(Turn("user", last_user.text))
        after = conv.with_turns(turns, metadata=conv.metadata)
    elif style == "codex":
        users = [t for t in conv.turns[:start] if t.role == "user"]
        after = conv.with_turns(users + [Turn("user", CODEX_CONTINUATION + summary)] + tail)
    elif style == "langchain":
        after = conv.with_turns([Turn("user", LANGCHAIN_CONTINUATION + summary)] + tail)
    elif style == "openhands":
        oh = write_summary(conv, span, drop=drop_set, alter=alter, header=f"USER_CONTEXT: {conv.goal}")
        after = conv.with_turns([first, Turn("user", oh)] + tail)
    elif style == "aider":
        after = conv.with_turns([Turn("user", AIDER_CONTINUATION + summary), Turn("assistant", "Ok.")] + tail)
    elif style == "letta":
        alert = {
            "type": "system_alert",
            "message": (
                f"Note: prior messages ({n_lost} of {n} total messages) have been hidden from view due to conversation "
                f"memory constraints.\nThe following is a summary of the previous messages:\n {summary}"
            ),
            "time": "2024-06-11 10:02:11 AM UTC+0000",
        }
        after = conv.with_turns([Turn("user", json.dumps(alert, indent=2))] + tail)
    elif style == "cline":
        cid = "toolu_summarize_" + conv.task
        call = Turn("assistant", "", calls=(ToolCall(cid, "summarize_task", {"context": summary}),))
        result = Turn(
            "tool",
            "This session is being continued from a previous conversation that ran out of context. "
            "The conversation is summarized below:\n" + summary,
            call_id=cid,
            tool_name="summarize_task",
        )
        after = conv.with_turns([first, call, result] + tail)
    elif style == "goose":
        after = conv.with_turns(
            [
                Turn("user", "The following is a summary of our conversation so far:\n" + summary),
                Turn("assistant", "Your context was compacted. The previous conversation was summarized and I will continue from that summary."),
            ]
            + tail
        )
    else:  # truncation: the head is cut, nothing replaces it
        after = conv.with_turns(tail)
    c = _truth(conv, after, alter, span)
    return replace(c, style=style)


def scrub(conv: Conversation, values: Iterable[str], replacement: str = "(value omitted)") -> Conversation:
    """Remove every occurrence of ``values`` from every turn (texts and tool-call
    arguments): what a compaction does when it drops a binding from *every* message."""
    vals = sorted(set(values), key=len, reverse=True)

    def clean(text: str) -> str:
        for v in vals:
            text = text.replace(v, replacement)
        return text

    def clean_obj(obj: Any) -> Any:
        if isinstance(obj, str):
            return clean(obj)
        if isinstance(obj, Mapping):
            return {k: clean_obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [clean_obj(v) for v in obj]
        return obj

    turns = [
        replace(t, text=clean(t.text), calls=tuple(replace(c, arguments=clean_obj(c.arguments)) for c in t.calls))
        for t in conv.turns
    ]
    return conv.with_turns(turns, system=clean(conv.system))


def _command_line(c: ToolCall) -> str | None:
    cmd = c.arguments.get("command") if isinstance(c.arguments, Mapping) else None
    return cmd if isinstance(cmd, str) else None


def pasted(conv: Conversation, style: Literal["aider", "cline"] = "aider") -> Conversation:
    """The same history from an agent without tool calling: every call and its result
    become text (PRINCIPLES §2: the role that carries the text does not matter).

    ``aider``: the user pastes ``I ran this command: … And got this output: …`` (a JSON
    tool call is pasted as ``[tool for '{args}'] Result:``); ``cline``: the assistant writes
    ``<execute_command><command>…</command></execute_command>`` and the user answers
    ``[execute_command for '…'] Result:``. Planted values and steps keep their meaning;
    turn indices change, so steps are re-indexed."""
    out: list[Turn] = []
    index: dict[int, int] = {}
    calls: dict[str, ToolCall] = {}
    for i, t in enumerate(conv.turns):
        if t.role == "assistant" and t.calls:
            for c in t.calls:
                calls[c.id] = c
            if style == "cline":
                xml = "\n".join(
                    f"<execute_command>\n<command>{_command_line(c)}</command>\n</execute_command>"
                    if _command_line(c) is not None
                    else f"<{c.name}>\n{json.dumps(c.arguments)}\n</{c.name}>"
                    for c in t.calls
                )
                out.append(Turn("assistant", (t.text + "\n" if t.text else "") + xml))
            elif t.text:
                out.append(Turn("assistant", t.text))
            index[i] = max(0, len(out) - 1)
            continue
        if t.role == "tool":
            c = calls.get(t.call_id or "")
            cmd = _command_line(c) if c is not None else None
            if style == "aider" and cmd is not None:
                text = f"I ran this command:\n\n{cmd}\n\nAnd got this output:\n\n{t.text}\n"
            elif cmd is not None:
                text = f"[execute_command for '{cmd}'] Result:\nCommand executed.\nOutput:\n{t.text}"
            else:
                args = json.dumps(c.arguments) if c is not None else ""
                text = f"[{c.name if c else 'tool'} for '{args}'] Result:\n{t.text}"
            out.append(Turn("user", text))
            index[i] = len(out) - 1
            continue
        out.append(t)
        index[i] = len(out) - 1
    steps = tuple(replace(st, first=index.get(st.first, 0), last=index.get(st.last, 0)) for st in conv.steps)
    planted = tuple(replace(p, turn=index.get(p.turn, p.turn)) for p in conv.planted)
    return replace(conv, turns=tuple(out), steps=steps, planted=planted, tools=())


def benign_truncation(conv: Conversation) -> Compaction:
    """Plain truncation that cuts only the read-only head (before the first binding)."""
    return compact(conv, "truncation", keep_last=len(conv.turns) - conv.first_binding_step())


def mask(conv: Conversation, turns: Iterable[int], placeholder: str = CLEARED) -> Compaction:
    """Replace the tool results at ``turns`` with ``placeholder`` (in-place masking)."""
    idx = set(turns)
    after = conv.with_turns([replace(t, text=placeholder) if i in idx and t.role == "tool" else t for i, t in enumerate(conv.turns)])
    return replace(_truth(conv, after, {}, sorted(idx)), style="mask")


# --------------------------------------------------------------------------- summarize calls


def transcript(conv: Conversation, turns: Iterable[int] | None = None) -> str:
    """The history as text: ``user: …`` / ``assistant: …`` / ``tool (bash): …`` lines."""
    out = []
    for i in range(len(conv.turns)) if turns is None else turns:
        t = conv.turns[i]
        if t.role == "tool":
            out.append(f"tool ({t.tool_name}): {t.text}")
        else:
            calls = " ".join(f"[calls {c.name} {json.dumps(c.arguments)}]" for c in t.calls)
            out.append(f"{t.role}: {t.text} {calls}".rstrip())
    return "\n".join(out)


SUMMARIZE_PROMPTS: dict[str, str] = {
    "claude_code": (
        "Your task is to create a detailed summary of the conversation so far, paying close attention to the "
        "user's explicit requests and your previous actions."
    ),
    "codex": "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task.",
    "langchain": (
        "<role>Context Extraction Assistant</role>\n<primary_objective>Extract the most relevant context from the "
        "conversation history below.</primary_objective>\n<messages>\nMessages to summarize:\n{transcript}\n</messages>"
    ),
    "openhands": (
        "You are maintaining a context-aware state summary for an interactive agent. Track USER_CONTEXT, COMPLETED, "
        "PENDING and CODE_STATE.\n<PREVIOUS SUMMARY>\n</PREVIOUS SUMMARY>\n{transcript}"
    ),
    "aider": "*Briefly* summarize this partial conversation about programming. Include less detail about older parts.",
    "letta": (
        "The following messages are being evicted from the BEGINNING of your context window. Write a summary "
        "that captures what happened in these messages.\n{transcript}"
    ),
    "cline": '<explicit_instructions type="summarize_task">Summarize the task so far, then call summarize_task.</explicit_instructions>',
    "goose": "Please summarize the conversation history provided in the system prompt.",
    "generic": "Summarize the following conversation so that another assistant can continue it:\n\n{transcript}",
}


def summarization_request(conv: Conversation, style: str) -> Conversation:
    """The summarization call agent ``style`` sends (the gate's moment). ``generic`` is a
    marker-free call with the history pasted as text."""
    tx = transcript(conv)
    prompt = SUMMARIZE_PROMPTS[style]
    if style in ("claude_code", "codex", "cline"):
        return conv.then(Turn("user", prompt))
    if style == "aider":
        aider_tx = "\n".join(
            f"# {'USER' if t.role == 'user' else 'ASSISTANT'}\n{t.text}" for t in conv.turns if t.role != "tool" and t.text
        )
        return conv.with_turns([Turn("user", aider_tx)], system=prompt, tools=())
    if style == "goose":
        return conv.with_turns([Turn("user", prompt)], system="You summarize conversations.\n" + tx, tools=())
    return conv.with_turns([Turn("user", prompt.format(transcript=tx))], system="", tools=())


__all__ = [
    "MASK_STYLES",
    "STYLES",
    "SUMMARIZE_PROMPTS",
    "TASKS",
    "Compaction",
    "Conversation",
    "Planted",
    "Step",
    "ToolCall",
    "Turn",
    "benign_truncation",
    "build_task",
    "compact",
    "mask",
    "pasted",
    "scrub",
    "summarization_request",
    "transcript",
    "write_summary",
]
