"""A held-out corpus: task families, compaction styles and dialects that the shared dev
corpus does not have, labelled by corpus/PRINCIPLES.md — never by what the gate does.

Families (each a small, realistic agent history; the values a later step needs are
labelled with the rule that makes them required):

- ``dns_cli`` — a CNAME switched with ``aws route53``: the previous target (§2b, read by
  ``dig`` before the change), the change id (§2a);
- ``dns_api`` — an A record updated through a DNS provider's tools: the previous address
  (§2b); the record id is the identity of the record (§3b);
- ``feature_flag`` — a flag's variation flipped: the previous variation (§2b), the
  change id (§2a);
- ``db_row`` — an UPDATE after a SELECT of the same row: the previous value (§2b);
- ``gcp_operation`` / ``azure_operation`` — async cloud operations (§2a);
- ``sqs_receipt`` — a received message's receipt handle (§2a);
- ``etcd_lease`` / ``consul_session`` — a lease id, a session id (§2a);
- ``blue_green`` — a load balancer switched from blue to green: the blue target group
  (§2b);
- ``ci_pipeline`` — a pipeline run id, numeric (§2a);
- ``container`` — ``docker run -d``: the container id (§2a); the pull's layer digests are
  noise (§3d);
- ``payment_intent`` — an idempotency key the agent generated (§2c), the intent id and
  the charge (§2a), a client secret minted by the step (a required secret: §4);
- ``backup_stamp`` — a backup path with a time stamp (§2a), its checksum is derivable;
- ``change_ticket`` — a change number and sys_id of a vendor API without a known prefix
  (§2a);
- negatives: ``noise_readonly`` (only read-only output and noise: request and trace ids,
  layer digests, wheel hashes, a git log) and ``echo_only`` (state-changing steps that
  only echo the names the agent gave).

Styles: ``json_state``, ``system_memory``, ``tool_digest``, ``drop_tools``,
``assistant_bullets``, ``middle_out`` (new) and ``claude_code``, ``codex`` (known).
Dialects: OpenAI chat, Anthropic, the Responses API, and histories without tool calls
(``pasted_aider``: command output pasted by the user; ``pasted_cline``).

Write the cases in the shared corpus's format and score them with its scorer::

    python -m tests.corpus.heldout --out /tmp/heldout && ../shared/corpus/score /tmp/heldout
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.support.conversations import (
    BASH_TOOL,
    Conversation,
    Ids,
    Planted,
    Step,
    ToolCall,
    Turn,
    _visible,
    pasted,
)

# --------------------------------------------------------------------------- builder


@dataclass(frozen=True)
class Label:
    value: str
    required: bool
    rule: str
    secret: bool = False


class _Ids(Ids):
    """The shared deterministic ids, plus the shapes these families need."""

    def upper(self, n: int) -> str:
        return self._mixed(string.ascii_uppercase + string.digits, n)

    def lower(self, n: int) -> str:
        return self._mixed(string.ascii_lowercase + string.digits, n)

    def num(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class _Fam:
    def __init__(self, family: str, seed: int) -> None:
        self.family = family
        self.rng = random.Random(f"heldout:{family}:{seed}")
        self.ids = _Ids(self.rng)
        self.turns: list[Turn] = []
        self.labels: list[Label] = []
        self.steps: list[Step] = []
        self._n = 0

    def user(self, text: str) -> None:
        self.turns.append(Turn("user", text))

    def say(self, text: str) -> None:
        self.turns.append(Turn("assistant", text))

    def call(
        self,
        tool: str,
        args: dict[str, Any],
        output: str,
        recap: str,
        *,
        required: Sequence[tuple[str, str]] = (),
        regen: Sequence[str] = (),
        secrets: Sequence[str] = (),
        say: str = "",
    ) -> None:
        """One tool call and its result. ``required``: (value, rule) pairs;
        ``regen``: values that are not required (read-only, echoes, noise)."""
        self._n += 1
        cid = f"call_{self.ids.alnum(16)}"
        first = len(self.turns)
        self.turns.append(Turn("assistant", say, calls=(ToolCall(cid, tool, args),)))
        self.turns.append(Turn("tool", output, call_id=cid, tool_name=tool))
        text = json.dumps(args) + "\n" + output
        for v, rule in required:
            assert v in text, (self.family, v)
            if not any(lb.value == v for lb in self.labels):
                self.labels.append(Label(v, True, rule))
        for v in secrets:
            assert v in text, (self.family, v)
            self.labels.append(Label(v, True, "2a", secret=True))
        for v in regen:
            assert v in text, (self.family, v)
            if not any(lb.value == v for lb in self.labels):
                self.labels.append(Label(v, False, "3"))
        self.steps.append(Step(first, first + 1, recap, tuple(v for v, _ in required)))

    def bash(self, command: str, output: str, recap: str, **kw: Any) -> None:
        self.call("bash", {"command": command}, output, recap, **kw)

    def noise(self) -> None:
        """A read-only test run, as agents do between steps."""
        n = self.ids.num(40, 900)
        self.bash(
            "pytest -q tests/",
            f"collected {n} items\n{n - 2} passed, 2 skipped in {self.ids.num(3, 90)}.{self.ids.num(10, 99)}s\n"
            f"HTTP/1.1 200 OK  content-length: {self.ids.num(300, 9000)}",
            "ran the tests",
        )

    def build(self, system: str, goal: str) -> tuple[Conversation, tuple[Label, ...]]:
        conv = Conversation(
            task=self.family,
            system=system,
            turns=tuple(self.turns),
            planted=tuple(Planted(lb.value, lb.value, "x", not lb.required, 0, lb.rule) for lb in self.labels),
            steps=tuple(self.steps),
            goal=goal,
            tools=(BASH_TOOL,),
        )
        return conv, tuple(self.labels)


# --------------------------------------------------------------------------- families


def _dns_cli(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    zone = "Z" + f.ids.upper(13)
    old = f"lb-blue-{f.ids.hex(8)}.eu-west-1.elb.amazonaws.com"
    new = f"lb-green-{f.ids.hex(8)}.eu-west-1.elb.amazonaws.com"
    change = "/change/C" + f.ids.upper(13)
    f.user("Point www.shop-demo.io at the green load balancer. Keep the current target so we can switch back.")
    f.bash(
        "aws route53 list-hosted-zones-by-name --dns-name shop-demo.io --max-items 1",
        json.dumps({"HostedZones": [{"Id": f"/hostedzone/{zone}", "Name": "shop-demo.io.", "ResourceRecordSetCount": 14}]}, indent=2),
        "found the hosted zone",
        regen=[zone],
    )
    f.bash("dig +short CNAME www.shop-demo.io", old + ".", "read the current CNAME target", required=[(old, "2b")])
    f.bash(
        "aws elbv2 describe-load-balancers --names shop-green --query 'LoadBalancers[0].DNSName' --output text",
        new,
        "looked up the green load balancer",
        regen=[new],
    )
    batch = json.dumps({"Changes": [{"Action": "UPSERT", "ResourceRecordSet": {"Name": "www.shop-demo.io", "Type": "CNAME", "TTL": 60, "ResourceRecords": [{"Value": new}]}}]})
    f.bash(
        f"aws route53 change-resource-record-sets --hosted-zone-id {zone} --change-batch '{batch}'",
        json.dumps({"ChangeInfo": {"Id": change, "Status": "PENDING", "SubmittedAt": "2024-06-11T09:14:02.511Z"}}, indent=2),
        "submitted the record change",
        required=[(change, "2a")],
    )
    f.noise()
    f.bash(f"aws route53 get-change --id {change}", json.dumps({"ChangeInfo": {"Id": change, "Status": "INSYNC"}}), "the change is in sync")
    return f.build("You are an SRE agent with AWS CLI access.", "switch www.shop-demo.io to the green load balancer, reversibly")


def _dns_api(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    rec = f.ids.hex(32)
    old = f"10.{f.ids.num(1, 250)}.{f.ids.num(1, 250)}.{f.ids.num(2, 250)}"
    new = f"10.{f.ids.num(1, 250)}.{f.ids.num(1, 250)}.{f.ids.num(2, 250)}"
    f.user(f"Move api.shop-demo.io to the new ingress at {new}; if health checks fail, put the old address back.")
    f.call(
        "dns_list_records",
        {"zone": "shop-demo.io", "name": "api.shop-demo.io"},
        json.dumps({"result": [{"id": rec, "type": "A", "name": "api.shop-demo.io", "content": old, "ttl": 300, "proxied": False}]}),
        "read the current A record",
        required=[(old, "2b")],
        regen=[rec],
    )
    f.call(
        "dns_update_record",
        {"zone": "shop-demo.io", "record_id": rec, "type": "A", "content": new, "ttl": 60},
        json.dumps({"success": True, "result": {"id": rec, "content": new, "modified_on": "2024-06-11T09:20:11Z"}}),
        "updated the A record",
    )
    f.noise()
    return f.build("You are an infrastructure agent. Tools: dns_list_records, dns_update_record, bash.", "move api.shop-demo.io to the new ingress, reversibly")


def _feature_flag(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    old, new = "var_" + f.ids.lower(10), "var_" + f.ids.lower(10)
    chg = "chg_" + f.ids.alnum(16)
    f.user("Turn the checkout-v2 flag to the 'new-flow' variation in production; we may need to revert it exactly.")
    f.call(
        "flags_get",
        {"project": "web", "key": "checkout-v2"},
        json.dumps(
            {
                "key": "checkout-v2",
                "environments": {"production": {"on": True, "fallthrough": {"variation": old}}},
                "variations": [{"_id": old, "name": "control"}, {"_id": new, "name": "new-flow"}],
                "_version": f.ids.num(20, 90),
            },
            indent=2,
        ),
        "read the flag",
        required=[(old, "2b")],
        regen=[new],
    )
    f.call(
        "flags_update",
        {"project": "web", "key": "checkout-v2", "env": "production", "fallthrough_variation": new},
        json.dumps({"key": "checkout-v2", "change": {"id": chg, "status": "applied"}}),
        "switched the flag to new-flow",
        required=[(chg, "2a")],
    )
    f.noise()
    return f.build("You are a release agent. Tools: flags_get, flags_update, bash.", "flip checkout-v2 to new-flow in production, reversibly")


def _db_row(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    acct = str(f.ids.num(1000, 9999))
    old, new = "cus_" + f.ids.alnum(14), "cus_" + f.ids.alnum(14)
    f.user(f"Account {acct} must bill to customer {new} from now on. Keep the old customer reference for finance.")
    f.bash(
        f'psql -d billing -c "SELECT id, billing_customer, plan FROM accounts WHERE id = {acct}"',
        f"  id  | billing_customer     | plan\n------+----------------------+------\n {acct} | {old}   | pro\n(1 row)",
        "read the account row",
        required=[(old, "2b")],
    )
    f.bash(
        f"psql -d billing -c \"UPDATE accounts SET billing_customer = '{new}' WHERE id = {acct}\"",
        "UPDATE 1",
        "updated the billing customer",
    )
    f.bash(
        f'psql -d billing -c "SELECT billing_customer FROM accounts WHERE id = {acct}"',
        f" billing_customer\n------------------\n {new}\n(1 row)",
        "checked the new value",
        regen=[new],
    )
    return f.build("You are a database operations agent with shell access.", f"re-point account {acct} to the new billing customer")


def _gcp_operation(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    op = f.ids.uuid()
    f.user("Resize the prod-db Cloud SQL instance to 4 vCPUs without blocking; track the operation.")
    f.bash("gcloud sql instances describe prod-db --format='value(settings.tier)'", "db-custom-2-8192", "read the current tier")
    f.bash(
        "gcloud sql instances patch prod-db --tier=db-custom-4-16384 --async --format=json",
        json.dumps({"kind": "sql#operation", "name": op, "operationType": "UPDATE", "status": "PENDING", "targetId": "prod-db", "insertTime": "2024-06-11T09:30:00.102Z"}, indent=2),
        "started the resize operation",
        required=[(op, "2a")],
    )
    f.noise()
    f.bash(f"gcloud sql operations describe {op} --format='value(status)'", "RUNNING", "the operation is running")
    return f.build("You are a cloud operations agent with gcloud.", "resize prod-db asynchronously and follow the operation")


def _azure_operation(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    sub, op = f.ids.uuid(), f.ids.uuid()
    url = f"https://management.azure.com/subscriptions/{sub}/providers/Microsoft.Compute/locations/westeurope/operations/{op}?api-version=2024-03-01"
    f.user("Resize api-vm-01 to Standard_D4s_v5 without waiting, then poll the async operation until it finishes.")
    f.bash("az account show --query id -o tsv", sub, "read the subscription", regen=[sub])
    f.bash(
        "az vm resize -g shop-rg -n api-vm-01 --size Standard_D4s_v5 --no-wait --debug 2>&1 | grep -i azure-asyncoperation",
        f"DEBUG: Response headers: 'Azure-AsyncOperation': '{url}'",
        "started the resize",
        # the operation URL's identifying token is the operation id (§4)
        required=[(op, "2a")],
    )
    f.noise()
    return f.build("You are a cloud operations agent with the az CLI.", "resize api-vm-01 and poll the operation")


def _sqs_receipt(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    acct = str(f.ids.num(10**11, 10**12 - 1))
    q = f"https://sqs.eu-west-1.amazonaws.com/{acct}/invoice-jobs"
    handle = "AQEB" + f.ids.alnum(140)
    f.user("Take one job from the invoice-jobs queue, process it, and delete it only once it succeeded.")
    f.bash("aws sqs get-queue-url --queue-name invoice-jobs", json.dumps({"QueueUrl": q}), "found the queue", regen=[q])
    f.bash(
        f"aws sqs receive-message --queue-url {q} --visibility-timeout 900 --max-number-of-messages 1",
        json.dumps({"Messages": [{"ReceiptHandle": handle, "Body": json.dumps({"invoice": f"INV-2024-{f.ids.num(1000, 9999)}"})}]}, indent=2),
        "received a job",
        required=[(handle, "2a")],
    )
    f.noise()
    return f.build("You are a worker agent with AWS CLI access.", "process one invoice job and delete it after success")


def _etcd_lease(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    lease = f.ids.hex(16)
    f.user("Hold the reindex lock in etcd for two minutes while the reindex runs; release it when done.")
    f.bash("etcdctl lease grant 120", f"lease {lease} granted with TTL(120s)", "granted a lease", required=[(lease, "2a")])
    f.bash(f"etcdctl put --lease={lease} /locks/reindex worker-3", "OK", "took the lock under the lease")
    f.noise()
    return f.build("You are an operations agent with etcdctl.", "hold the reindex lock during the reindex")


def _consul_session(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    sid = f.ids.uuid()
    f.user("Acquire the deploy lock in Consul before deploying, and release it afterwards.")
    f.bash(
        "curl -s -X PUT http://127.0.0.1:8500/v1/session/create -d '{\"Name\": \"deploy-lock\", \"TTL\": \"60s\"}'",
        json.dumps({"ID": sid}),
        "created a session",
        required=[(sid, "2a")],
    )
    f.bash(f"curl -s -X PUT 'http://127.0.0.1:8500/v1/kv/locks/deploy?acquire={sid}' -d 'ci-runner-7'", "true", "acquired the lock")
    f.noise()
    return f.build("You are a deploy agent with shell access.", "deploy under the Consul lock")


def _blue_green(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    acct = str(f.ids.num(10**11, 10**12 - 1))
    listener = f"arn:aws:elasticloadbalancing:eu-west-1:{acct}:listener/app/shop/{f.ids.hex(16)}/{f.ids.hex(16)}"
    blue = f"arn:aws:elasticloadbalancing:eu-west-1:{acct}:targetgroup/shop-blue/{f.ids.hex(16)}"
    green = f"arn:aws:elasticloadbalancing:eu-west-1:{acct}:targetgroup/shop-green/{f.ids.hex(16)}"
    f.user(f"Switch the shop listener from blue to green. Listener: {listener}. Be ready to switch back.")
    f.bash(
        f"aws elbv2 describe-listeners --listener-arns {listener}",
        json.dumps({"Listeners": [{"ListenerArn": listener, "Port": 443, "DefaultActions": [{"Type": "forward", "TargetGroupArn": blue}]}]}, indent=2),
        "read the listener's current target group",
        required=[(blue, "2b")],
    )
    f.bash(
        "aws elbv2 describe-target-groups --names shop-green",
        json.dumps({"TargetGroups": [{"TargetGroupArn": green, "TargetGroupName": "shop-green", "Port": 8080}]}, indent=2),
        "looked up the green target group",
        regen=[green],
    )
    f.bash(
        f"aws elbv2 modify-listener --listener-arn {listener} --default-actions Type=forward,TargetGroupArn={green}",
        json.dumps({"Listeners": [{"ListenerArn": listener, "DefaultActions": [{"Type": "forward", "TargetGroupArn": green}]}]}, indent=2),
        "switched the listener to green",
    )
    f.noise()
    return f.build("You are a release agent with AWS CLI access.", "switch the shop listener from blue to green, reversibly")


def _ci_pipeline(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    pid = f.ids.num(1_000_000, 9_999_999)
    f.user("Trigger the release pipeline for release/2.14 and watch it.")
    f.call(
        "ci_trigger_pipeline",
        {"project": "acme/shop", "ref": "release/2.14"},
        json.dumps({"id": pid, "iid": f.ids.num(100, 999), "status": "created", "ref": "release/2.14", "web_url": f"https://ci.acme.io/acme/shop/-/pipelines/{pid}"}),
        "triggered the pipeline",
        required=[(str(pid), "2a")],
    )
    f.call("ci_get_pipeline", {"project": "acme/shop", "id": pid}, json.dumps({"id": pid, "status": "running"}), "the pipeline is running")
    f.noise()
    return f.build("You are a release agent. Tools: ci_trigger_pipeline, ci_get_pipeline, bash.", "run the release pipeline for release/2.14")


def _container(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    layers = [f.ids.hex(12) for _ in range(3)]
    digest = "sha256:" + f.ids.hex(64)
    cid = f.ids.hex(64)
    img = "registry.acme.io/shop/web:2.14.0"
    f.user("Start a canary container of web 2.14.0 on port 8081 next to the running one; we will remove it after the check.")
    f.bash(
        f"docker pull {img}",
        "2.14.0: Pulling from shop/web\n" + "\n".join(f"{x}: Pull complete" for x in layers) + f"\nDigest: {digest}\nStatus: Downloaded newer image for {img}",
        "pulled the image",
        regen=[*layers, digest],
    )
    f.bash(f"docker run -d --name web-canary -p 8081:80 {img}", cid, "started the canary container", required=[(cid, "2a")])
    f.noise()
    return f.build("You are a deploy agent with docker.", "run a canary of web 2.14.0 and remove it after the check")


def _payment_intent(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    cus = "cus_" + f.ids.alnum(14)
    key = f.ids.uuid()
    pi = "pi_" + f.ids.alnum(24)
    secret = f"{pi}_secret_{f.ids.alnum(24)}"
    ch = "ch_" + f.ids.alnum(24)
    f.user(f"Charge customer {cus} 25.00 EUR for the replacement part, exactly once.")
    f.call(
        "payments_create_intent",
        {"amount": 2500, "currency": "eur", "customer": cus, "idempotency_key": key},
        json.dumps({"id": pi, "object": "payment_intent", "status": "requires_confirmation", "client_secret": secret, "customer": cus}),
        "created the payment intent",
        required=[(key, "2c"), (pi, "2a")],
        secrets=[secret],
        regen=[cus],
    )
    f.call(
        "payments_confirm_intent",
        {"id": pi, "payment_method": "pm_card_visa"},
        json.dumps({"id": pi, "status": "succeeded", "latest_charge": ch}),
        "confirmed the payment",
        required=[(ch, "2a")],
    )
    f.noise()
    return f.build("You are a billing agent. Tools: payments_create_intent, payments_confirm_intent, bash.", f"charge {cus} once")


def _backup_stamp(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    stamp = f"2024-06-{f.ids.num(10, 28)}T0{f.ids.num(1, 9)}-{f.ids.num(10, 59)}-{f.ids.num(10, 59)}Z"
    path = f"/var/backups/shop/shop-{stamp}.dump"
    digest = f.ids.hex(64)
    f.user("Back up the shop database before the schema change, then apply the change. Keep the backup file at hand.")
    f.bash(
        "backup-db --database shop --target /var/backups/shop",
        f"Backup written to {path} (4.2 GB)\nsha256: {digest}",
        "backed up the database",
        required=[(path, "2a")],
        regen=[digest],
    )
    f.bash("psql -d shop -f migrations/2024_06_add_index.sql", "CREATE INDEX", "applied the schema change")
    f.noise()
    return f.build("You are a database operations agent with shell access.", "back up shop, then apply the schema change")


def _change_ticket(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    number = f"CHG{f.ids.num(10**6, 10**7 - 1)}"
    sys_id = f.ids.hex(32)
    issue = f"OPS-{f.ids.num(1000, 9999)}"
    f.user("Open a change request for tonight's prod-db resize and a follow-up ticket for the runbook update.")
    f.call(
        "itsm_create_change",
        {"summary": "Resize prod-db to 4 vCPU", "risk": "low", "window": "2024-06-12T01:00Z"},
        json.dumps({"result": {"number": number, "sys_id": sys_id, "state": "new"}}),
        "opened the change request",
        required=[(number, "2a"), (sys_id, "2a")],
    )
    f.call(
        "jira_create_issue",
        {"project": "OPS", "summary": "Update the prod-db resize runbook", "type": "Task"},
        json.dumps({"id": str(f.ids.num(10000, 99999)), "key": issue, "self": "https://acme.atlassian.net/rest/api/2/issue/" + issue}),
        "opened the follow-up ticket",
        required=[(issue, "2a")],
    )
    f.noise()
    return f.build("You are an operations agent. Tools: itsm_create_change, jira_create_issue, bash.", "open the change request and the follow-up ticket")


def _noise_readonly(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    rid, trace = f.ids.uuid(), f.ids.hex(32)
    layers = [f.ids.hex(12) for _ in range(2)]
    digest = "sha256:" + f.ids.hex(64)
    shas = [f.ids.hex(7) for _ in range(4)]
    wheel = f.ids.hex(64)
    order = "ord_" + f.ids.alnum(16)
    req = "req_" + f.ids.alnum(14)
    f.user("The checkout API is slow. Investigate, but do not change anything yet.")
    f.bash(
        "kubectl -n shop logs deploy/api --tail=2",
        f"2024-06-11T09:40:01Z INFO request_id={rid} trace_id={trace} POST /v1/checkout 200 1840ms\n2024-06-11T09:40:02Z INFO GET /healthz 200 2ms",
        "read the api logs",
        regen=[rid, trace],
    )
    f.bash(
        "docker pull registry.acme.io/shop/api:2.13.1",
        "2.13.1: Pulling from shop/api\n" + "\n".join(f"{x}: Already exists" for x in layers) + f"\nDigest: {digest}\nStatus: Image is up to date for registry.acme.io/shop/api:2.13.1",
        "pulled the running image to inspect it",
        regen=[*layers, digest],
    )
    f.bash("git log --oneline -4", "\n".join(f"{s} {m}" for s, m in zip(shas, ["tune pool", "add cache", "bump deps", "fix retry"], strict=True)), "read the recent history", regen=shas)
    f.bash(
        "pip install --no-deps ./vendor/profiler",
        f"Processing ./vendor/profiler\nBuilding wheels for collected packages: profiler\n  Created wheel for profiler: filename=profiler-0.4.1-py3-none-any.whl size=18211 sha256={wheel}\nSuccessfully installed profiler-0.4.1",
        "installed the profiler",
        regen=[wheel],
    )
    f.call(
        "http_request",
        {"method": "GET", "url": f"https://api.shop-demo.io/v1/orders/{order}"},
        json.dumps({"id": order, "status": "paid", "request_id": req}),
        "fetched a slow order",
        regen=[order, req],
    )
    return f.build("You are an SRE agent. Investigate only.", "find why checkout is slow, read-only")


def _echo_only(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    f.user("Create the exports bucket acme-exports-eu, a data directory, and label the api deployment for the payments team.")
    f.bash("aws s3 mb s3://acme-exports-eu --region eu-west-1", "make_bucket: acme-exports-eu", "created the bucket", regen=["s3://acme-exports-eu"])
    f.bash("mkdir -p /srv/data/exports/eu && ls -d /srv/data/exports/eu", "/srv/data/exports/eu", "created the directory", regen=["/srv/data/exports/eu"])
    f.bash("kubectl -n shop label deployment/api team=payments", "deployment.apps/api labeled", "labelled the deployment", regen=["deployment.apps/api"])
    f.call("write_file", {"path": "config/exports.yaml", "content": "bucket: acme-exports-eu\nprefix: eu/\n"}, "wrote config/exports.yaml", "wrote the config", regen=["config/exports.yaml"])
    f.noise()
    return f.build("You are a platform agent with shell access.", "create the exports bucket and directory, label the deployment")


# ---- batch B: written after batch A was passing, without tuning the gate to them first


def _github_pr(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    n = f.ids.num(1000, 9999)
    url = f"https://github.com/acme/shop/pull/{n}"
    f.user("Open a pull request from fix/retry-budget to main and ask for review from the payments team.")
    f.bash("git push -u origin fix/retry-budget", "branch 'fix/retry-budget' set up to track 'origin/fix/retry-budget'.", "pushed the branch")
    f.bash(
        "gh pr create --base main --head fix/retry-budget --title 'Cap retries per request' --body 'See OPS incident notes.'",
        f"Creating pull request for fix/retry-budget into main in acme/shop\n\n{url}",
        "opened the pull request",
        # the URL's identifying token is the number the service assigned (§4)
        required=[(str(n), "2a")],
    )
    f.bash(f"gh pr edit {n} --add-reviewer acme/payments", url, "requested review")
    f.noise()
    return f.build("You are a coding agent working in a git repository.", "open the pull request and request review")


def _ecs_task(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    acct = str(f.ids.num(10**11, 10**12 - 1))
    task = f"arn:aws:ecs:eu-west-1:{acct}:task/prod/{f.ids.hex(32)}"
    f.user("Run the one-off migrate task on the prod cluster and wait for it to stop.")
    f.bash(
        "aws ecs run-task --cluster prod --task-definition shop-migrate:42 --launch-type FARGATE",
        json.dumps({"tasks": [{"taskArn": task, "lastStatus": "PROVISIONING", "desiredStatus": "RUNNING", "cpu": "256"}], "failures": []}, indent=2),
        "started the migrate task",
        required=[(task, "2a")],
    )
    f.noise()
    f.bash(f"aws ecs describe-tasks --cluster prod --tasks {task} --query 'tasks[0].lastStatus'", '"RUNNING"', "the task runs")
    return f.build("You are a cloud operations agent with AWS CLI access.", "run the migrate task on prod")


def _s3_version(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    old_v, new_v = f.ids.alnum(32), f.ids.alnum(32)
    old_e, new_e = f.ids.hex(32), f.ids.hex(32)
    f.user("Publish the new app.json to the config bucket; the previous version must stay restorable.")
    f.bash(
        "aws s3api head-object --bucket acme-config --key prod/app.json",
        json.dumps({"ContentLength": 2211, "ETag": f'"{old_e}"', "VersionId": old_v, "ContentType": "application/json"}, indent=2),
        "read the current object version",
        required=[(old_v, "2b"), (old_e, "2b")],
    )
    f.bash(
        "aws s3api put-object --bucket acme-config --key prod/app.json --body build/app.json",
        json.dumps({"ETag": f'"{new_e}"', "VersionId": new_v, "ServerSideEncryption": "AES256"}, indent=2),
        "uploaded the new version",
        required=[(new_v, "2a"), (new_e, "2a")],
    )
    f.noise()
    return f.build("You are a release agent with AWS CLI access.", "publish the new app.json, keeping the previous version restorable")


def _mongo_update(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    oid = f.ids.hex(24)
    old, new = "ful_" + f.ids.alnum(16), "ful_" + f.ids.alnum(16)
    f.user(f"Order {oid} was sent to the wrong warehouse; re-point it to fulfilment {new}, but keep the old reference.")
    f.bash(
        f"mongosh shop --quiet --eval 'db.orders.findOne({{_id: ObjectId(\"{oid}\")}}, {{status: 1, fulfillment_ref: 1}})'",
        f"{{ _id: ObjectId('{oid}'), status: 'paid', fulfillment_ref: '{old}' }}",
        "read the order",
        required=[(old, "2b")],
        regen=[oid],
    )
    f.bash(
        f"mongosh shop --quiet --eval 'db.orders.updateOne({{_id: ObjectId(\"{oid}\")}}, {{$set: {{fulfillment_ref: \"{new}\"}}}})'",
        "{ acknowledged: true, insertedId: null, matchedCount: 1, modifiedCount: 1, upsertedCount: 0 }",
        "updated the order",
    )
    f.noise()
    return f.build("You are a database operations agent with shell access.", "re-point the order's fulfilment reference")


def _temporal_workflow(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    run = f.ids.uuid()
    f.user("Start the refund workflow for order 88231 and keep an eye on it.")
    f.bash(
        "temporal workflow start --task-queue refunds --type RefundWorkflow --workflow-id refund-88231 --input '{\"order\": 88231}'",
        f"Running execution:\n  WorkflowId  refund-88231\n  RunId       {run}\n  Type        RefundWorkflow\n  Namespace   default\n  TaskQueue   refunds",
        "started the workflow",
        required=[(run, "2a")],
    )
    f.noise()
    f.bash(f"temporal workflow describe --workflow-id refund-88231 --run-id {run}", "Status  RUNNING", "the workflow runs")
    return f.build("You are an operations agent with the temporal CLI.", "run the refund workflow for order 88231")


def _spark_job(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    app = f"application_{f.ids.num(10**12, 10**13 - 1)}_{f.ids.num(1, 9999):04d}"
    f.user("Submit the nightly aggregation to the YARN cluster and check on it later.")
    f.bash(
        "spark-submit --master yarn --deploy-mode cluster --name nightly-agg jobs/aggregate.py",
        f"24/06/11 02:10:04 INFO Client: Requesting a new application from cluster with 12 NodeManagers\n24/06/11 02:10:05 INFO YarnClientImpl: Submitted application {app}\n24/06/11 02:10:06 INFO Client: Application report for {app} (state: ACCEPTED)",
        "submitted the job",
        required=[(app, "2a")],
    )
    f.noise()
    return f.build("You are a data engineering agent with shell access.", "run the nightly aggregation on YARN")


def _redis_lock(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    tok = f.ids.uuid()
    f.user("Take the reindex lock in Redis for 30 seconds with a random token, so only we can release it.")
    f.bash(f"redis-cli SET lock:reindex {tok} NX PX 30000", "OK", "took the lock", required=[(tok, "2c")])
    f.bash("redis-cli PTTL lock:reindex", "(integer) 27431", "checked the lock")
    f.noise()
    return f.build("You are an operations agent with redis-cli.", "run the reindex under the Redis lock")


def _acm_cert(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    acct = str(f.ids.num(10**11, 10**12 - 1))
    arn = f"arn:aws:acm:us-east-1:{acct}:certificate/{f.ids.uuid()}"
    f.user("Request a TLS certificate for shop-demo.io and www.shop-demo.io with DNS validation.")
    f.bash(
        "aws acm request-certificate --domain-name shop-demo.io --subject-alternative-names www.shop-demo.io --validation-method DNS",
        json.dumps({"CertificateArn": arn}, indent=2),
        "requested the certificate",
        required=[(arn, "2a")],
    )
    f.noise()
    return f.build("You are a cloud operations agent with AWS CLI access.", "get a certificate for shop-demo.io")


def _npm_publish(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    sha = f.ids.hex(40)
    f.user("Publish @acme/ui 2.3.0 to the internal registry.")
    f.bash(
        "npm publish --registry https://npm.acme.io",
        f"npm notice 📦  @acme/ui@2.3.0\nnpm notice package size: 48.1 kB\nnpm notice shasum: {sha}\nnpm notice total files: 112\n+ @acme/ui@2.3.0",
        "published the package",
        regen=[sha],
    )
    f.noise()
    return f.build("You are a release agent with shell access.", "publish @acme/ui 2.3.0")


FAMILIES_B: dict[str, Callable[[_Fam], tuple[Conversation, tuple[Label, ...]]]] = {
    "github_pr": _github_pr,
    "ecs_task": _ecs_task,
    "s3_version": _s3_version,
    "mongo_update": _mongo_update,
    "temporal_workflow": _temporal_workflow,
    "spark_job": _spark_job,
    "redis_lock": _redis_lock,
    "acm_cert": _acm_cert,
    "npm_publish": _npm_publish,
}


# ---- batch C: written after batch B was passing; scored before any change to the gate


def _cfn_update(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    acct = str(f.ids.num(10**11, 10**12 - 1))
    old = f"{acct}.dkr.ecr.eu-west-1.amazonaws.com/shop-api@sha256:{f.ids.hex(64)}"
    new = f"{acct}.dkr.ecr.eu-west-1.amazonaws.com/shop-api@sha256:{f.ids.hex(64)}"
    stack_id = f"arn:aws:cloudformation:eu-west-1:{acct}:stack/shop-api/{f.ids.uuid()}"
    f.user("Roll the shop-api stack to the new image; we must be able to put the old image back.")
    f.bash(
        "aws cloudformation describe-stacks --stack-name shop-api --query 'Stacks[0].Parameters'",
        json.dumps([{"ParameterKey": "ImageUri", "ParameterValue": old}, {"ParameterKey": "DesiredCount", "ParameterValue": "4"}], indent=2),
        "read the stack parameters",
        required=[(old.split("@")[1], "2b")],
    )
    f.bash(
        f"aws cloudformation update-stack --stack-name shop-api --use-previous-template --parameters ParameterKey=ImageUri,ParameterValue={new} ParameterKey=DesiredCount,UsePreviousValue=true",
        json.dumps({"StackId": stack_id}, indent=2),
        "started the stack update",
        required=[(new.split("@")[1], "2c")],
        regen=[stack_id],
    )
    f.noise()
    return f.build("You are a release agent with AWS CLI access.", "roll shop-api to the new image, reversibly")


def _subscription_price(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    sub, item = "sub_" + f.ids.alnum(24), "si_" + f.ids.alnum(14)
    old, new = "price_" + f.ids.alnum(24), "price_" + f.ids.alnum(24)
    inv = "in_" + f.ids.alnum(24)
    f.user(f"Move subscription {sub} to the annual price {new} without proration. Keep what it was on.")
    f.call(
        "stripe_get_subscription",
        {"id": sub},
        json.dumps({"id": sub, "status": "active", "items": {"data": [{"id": item, "price": {"id": old, "recurring": {"interval": "month"}}}]}}),
        "read the subscription",
        required=[(old, "2b")],
        regen=[item],
    )
    f.call(
        "stripe_update_subscription",
        {"id": sub, "items": [{"id": item, "price": new}], "proration_behavior": "none"},
        json.dumps({"id": sub, "status": "active", "latest_invoice": inv}),
        "updated the subscription",
        required=[(inv, "2a")],
    )
    f.noise()
    return f.build("You are a billing agent. Tools: stripe_get_subscription, stripe_update_subscription, bash.", f"move {sub} to the annual price")


def _twilio_sms(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    sid = "SM" + f.ids.hex(32)
    f.user("Text the on-call engineer that the deploy is paused, and confirm delivery later.")
    f.call(
        "twilio_send_sms",
        {"to": "+4915112345678", "body": "Deploy paused: canary error rate 3.1%"},
        json.dumps({"sid": sid, "status": "queued", "to": "+4915112345678", "date_created": "Tue, 11 Jun 2024 09:12:33 +0000"}),
        "sent the SMS",
        required=[(sid, "2a")],
    )
    f.noise()
    return f.build("You are an on-call assistant. Tools: twilio_send_sms, twilio_get_message, bash.", "notify on-call and confirm delivery")


def _pagerduty(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    inc = "Q" + f.ids.upper(13)
    f.user("Open a PagerDuty incident for the checkout latency and assign it to the payments escalation policy.")
    f.call(
        "pagerduty_create_incident",
        {"title": "Checkout p99 latency above 2s", "service_id": "PSRV4KQ", "urgency": "high"},
        json.dumps({"incident": {"id": inc, "incident_number": f.ids.num(1000, 9999), "status": "triggered", "html_url": f"https://acme.pagerduty.com/incidents/{inc}"}}),
        "opened the incident",
        required=[(inc, "2a")],
    )
    f.noise()
    return f.build("You are an SRE agent. Tools: pagerduty_create_incident, bash.", "open the latency incident")


def _gh_release(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    f.user("Publish the v2.14.0 release with generated notes.")
    f.bash(
        "gh release create v2.14.0 --generate-notes --target main",
        "https://github.com/acme/shop/releases/tag/v2.14.0",
        "published the release",
        regen=["https://github.com/acme/shop/releases/tag/v2.14.0"],
    )
    f.noise()
    return f.build("You are a release agent with the gh CLI.", "publish v2.14.0")


def _plan_only(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    iid = "i-0" + f.ids.hex(16)
    sg = "sg-0" + f.ids.hex(16)
    f.user("Show me what terraform would change in infra/prod; do not apply anything.")
    f.bash(
        "terraform -chdir=infra/prod plan -no-color",
        f"aws_instance.api: Refreshing state... [id={iid}]\naws_security_group.api: Refreshing state... [id={sg}]\n\n"
        "  # aws_instance.api will be updated in-place\n  ~ resource \"aws_instance\" \"api\" {\n      ~ instance_type = \"t3.large\" -> \"t3.xlarge\"\n    }\n\n"
        "Plan: 0 to add, 1 to change, 0 to destroy.",
        "ran the plan",
        regen=[iid, sg],
    )
    f.noise()
    return f.build("You are an infrastructure agent using terraform.", "show the plan for infra/prod without applying")


FAMILIES_C: dict[str, Callable[[_Fam], tuple[Conversation, tuple[Label, ...]]]] = {
    "cfn_update": _cfn_update,
    "subscription_price": _subscription_price,
    "twilio_sms": _twilio_sms,
    "pagerduty": _pagerduty,
    "gh_release": _gh_release,
    "plan_only": _plan_only,
}


# ---- batch D: written after batch C was passing, with two new compaction styles;
# scored before any change to the gate


def _kms_key(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    acct = str(f.ids.num(10**11, 10**12 - 1))
    key = f.ids.uuid()
    f.user("Create a KMS key for the exports bucket and give it the alias alias/exports-eu.")
    f.bash(
        "aws kms create-key --description 'exports-eu bucket key' --key-usage ENCRYPT_DECRYPT",
        json.dumps({"KeyMetadata": {"AWSAccountId": acct, "KeyId": key, "Arn": f"arn:aws:kms:eu-west-1:{acct}:key/{key}", "KeyState": "Enabled", "CreationDate": "2024-06-11T09:00:00+00:00"}}, indent=2),
        "created the key",
        required=[(key, "2a")],
    )
    f.bash(f"aws kms create-alias --alias-name alias/exports-eu --target-key-id {key}", "", "created the alias")
    f.noise()
    return f.build("You are a cloud security agent with AWS CLI access.", "create the exports KMS key and alias")


def _argo_rollout(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    old = f"ghcr.io/acme/web@sha256:{f.ids.hex(64)}"
    f.user("Move the web rollout to 1.5.0; if the analysis fails, go back to exactly what runs now.")
    f.bash(
        "kubectl argo rollouts get rollout web -n shop --no-color",
        f"Name:            web\nNamespace:       shop\nStatus:          ✔ Healthy\nStrategy:        Canary\nImages:          {old} (stable)\nReplicas:\n  Desired:       4\n  Current:       4",
        "read the rollout",
        required=[(old.split("@")[1], "2b")],
    )
    f.bash("kubectl argo rollouts set image web web=ghcr.io/acme/web:1.5.0 -n shop", 'rollout "web" image updated', "set the new image")
    f.noise()
    return f.build("You are a release agent with kubectl and the argo rollouts plugin.", "move web to 1.5.0, reversibly")


def _gsutil_copy(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    gen = str(f.ids.num(10**15, 10**16 - 1))
    f.user("Upload build.tar.gz to gs://acme-artifacts and list its generations.")
    f.bash(
        "gsutil cp build.tar.gz gs://acme-artifacts/",
        "Copying file://build.tar.gz [Content-Type=application/x-tar]...\n/ [1 files][ 12.3 MiB/ 12.3 MiB]\nOperation completed over 1 objects/12.3 MiB.",
        "uploaded the artifact",
    )
    f.bash("gsutil ls -a gs://acme-artifacts/build.tar.gz", f"gs://acme-artifacts/build.tar.gz#{gen}", "listed its generations", regen=[gen])
    f.noise()
    return f.build("You are a release agent with gsutil.", "upload the artifact")


def _ssh_keypair(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    kid = "key-0" + f.ids.hex(16)
    body = "\n".join(f.ids.alnum(64) for _ in range(4))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    f.user("Create an EC2 key pair deploy-2024 for the bastion; we need the private key once to install it.")
    f.bash(
        "aws ec2 create-key-pair --key-name deploy-2024 --key-type rsa",
        json.dumps({"KeyName": "deploy-2024", "KeyPairId": kid, "KeyMaterial": pem}, indent=2),
        "created the key pair",
        required=[(kid, "2a")],
        secrets=[json.dumps(pem)[1:-1]],  # as the JSON output carries it
    )
    f.noise()
    return f.build("You are a cloud operations agent with AWS CLI access.", "create the deploy key pair")


def _k8s_token(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    import base64

    head = base64.urlsafe_b64encode(b'{"alg":"RS256","kid":"' + f.ids.alnum(12).encode() + b'"}').decode().rstrip("=")
    claims = base64.urlsafe_b64encode(json.dumps({"sub": "system:serviceaccount:ci:deploy-bot", "exp": 1718100000}).encode()).decode().rstrip("=")
    jwt = f"{head}.{claims}.{f.ids.alnum(86)}"
    f.user("Mint a one-hour token for the ci/deploy-bot service account for the pipeline.")
    f.bash("kubectl create token deploy-bot -n ci --duration=1h", jwt, "minted the token", secrets=[jwt])
    f.noise()
    return f.build("You are a platform agent with kubectl.", "mint a token for deploy-bot")


def _cdn_purge(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    pid = f.ids.hex(32)
    zone = f.ids.hex(32)
    f.user(f"Purge the CDN cache for /assets/app.js in zone {zone}.")
    f.bash(
        f"curl -s -X POST https://api.cloudflare.com/client/v4/zones/{zone}/purge_cache -H 'Content-Type: application/json' --data '{{\"files\":[\"https://shop-demo.io/assets/app.js\"]}}'",
        json.dumps({"success": True, "errors": [], "messages": [], "result": {"id": pid}}),
        "purged the cache",
        required=[(pid, "2a")],
    )
    f.noise()
    return f.build("You are a web operations agent with shell access.", "purge /assets/app.js from the CDN")


def _mysql_binlog(f: _Fam) -> tuple[Conversation, tuple[Label, ...]]:
    binlog = f"mysql-bin.{f.ids.num(100, 999):06d}"
    f.user("Before resetting the replica's source position, record where the source is now.")
    f.bash(
        'mysql -h db-primary -e "SHOW MASTER STATUS\\G"',
        f"*************************** 1. row ***************************\n             File: {binlog}\n         Position: {f.ids.num(1000, 99999)}\n     Binlog_Do_DB:\n Executed_Gtid_Set: ",
        "recorded the source position",
        required=[(binlog, "2b")],
    )
    f.bash('mysql -h db-primary -e "RESET MASTER"', "", "reset the binary logs")
    f.noise()
    return f.build("You are a database operations agent with the mysql client.", "reset the binary logs, with the old position recorded")


FAMILIES_D: dict[str, Callable[[_Fam], tuple[Conversation, tuple[Label, ...]]]] = {
    "kms_key": _kms_key,
    "argo_rollout": _argo_rollout,
    "gsutil_copy": _gsutil_copy,
    "ssh_keypair": _ssh_keypair,
    "k8s_token": _k8s_token,
    "cdn_purge": _cdn_purge,
    "mysql_binlog": _mysql_binlog,
}


FAMILIES: dict[str, Callable[[_Fam], tuple[Conversation, tuple[Label, ...]]]] = {
    "dns_cli": _dns_cli,
    "dns_api": _dns_api,
    "feature_flag": _feature_flag,
    "db_row": _db_row,
    "gcp_operation": _gcp_operation,
    "azure_operation": _azure_operation,
    "sqs_receipt": _sqs_receipt,
    "etcd_lease": _etcd_lease,
    "consul_session": _consul_session,
    "blue_green": _blue_green,
    "ci_pipeline": _ci_pipeline,
    "container": _container,
    "payment_intent": _payment_intent,
    "backup_stamp": _backup_stamp,
    "change_ticket": _change_ticket,
    "noise_readonly": _noise_readonly,
    "echo_only": _echo_only,
}

# --------------------------------------------------------------------------- compaction

STYLES = ("json_state", "system_memory", "tool_digest", "drop_tools", "assistant_bullets", "middle_out", "claude_code", "codex")
#: Batch D adds two styles: old tool outputs cut to their first characters, and the
#: summary returned as the result of a summarize tool call (Cline's way).
STYLES_D = (*STYLES, "partial_truncate", "summary_in_tool")
MODES = ("keep_all", "keep_required", "drop_one", "drop_all", "alter")
DIALECTS = ("openai", "anthropic", "responses", "pasted_aider", "pasted_cline")


def _damage(v: str, rng: random.Random) -> str:
    """A value cut short, or with one character changed (PRINCIPLES §4: altered)."""
    if rng.random() < 0.5 and len(v) >= 8:
        return v[: max(6, len(v) * 2 // 3)]
    i = len(v) - 2
    c = v[i]
    pool = string.digits if c.isdigit() else string.ascii_lowercase if c.islower() else string.ascii_uppercase if c.isupper() else "x"
    return v[:i] + rng.choice([x for x in pool if x != c] or ["q"]) + v[i + 1 :]


def _refs(labels: Sequence[Label], mode: str, rng: random.Random) -> tuple[list[str], set[str]]:
    """The values a summary states, and the required ones it leaves out or damages."""
    req = [lb.value for lb in labels if lb.required]
    regen = [lb.value for lb in labels if not lb.required]
    if mode == "keep_all":
        return req + regen, set()
    if mode == "keep_required":
        return list(req), set()
    if mode == "drop_all" or not req:
        return [], set(req)
    if mode == "drop_one":
        gone = rng.choice(req)
        return [v for v in req if v != gone], {gone}
    gone = rng.choice(req)  # alter
    return [(_damage(v, rng) if v == gone else v) for v in req], {gone}


def _summary(conv: Conversation, refs: Sequence[str], style: str) -> str:
    recaps = "; ".join(st.recap for st in conv.steps)
    if style == "json_state":
        return json.dumps({"task": conv.goal, "done": [st.recap for st in conv.steps], "references": list(refs), "next": "continue and verify"}, indent=1)
    if style == "assistant_bullets":
        return "Progress so far:\n" + "\n".join(f"- {st.recap}" for st in conv.steps) + ("\nIdentifiers: " + ", ".join(f"`{r}`" for r in refs) if refs else "")
    return f"The user asked: {conv.goal}. So far: {recaps}." + (f" Key references: {', '.join(refs)}." if refs else "")


def _tail_start(turns: Sequence[Turn], keep: int) -> int:
    start = max(1, len(turns) - keep)
    while 0 < start < len(turns) and turns[start].role == "tool":
        start -= 1
    return start


def compact_heldout(conv: Conversation, style: str, refs: Sequence[str], keep: int) -> Conversation:
    """The history after a compaction in ``style`` whose summary states ``refs``."""
    turns = list(conv.turns)
    first = turns[0]
    start = _tail_start(turns, keep)
    tail = turns[start:]
    text = _summary(conv, refs, style)
    if style == "json_state":
        return conv.with_turns([first, Turn("user", "Context checkpoint (JSON state of the work so far):\n" + text)] + tail)
    if style == "system_memory":
        return replace(conv.with_turns([first] + tail), system=conv.system + "\n\n<memory>\n" + text + "\n</memory>")
    if style == "tool_digest":  # every old tool output replaced by a one-line digest, calls kept
        out = [replace(t, text=f"[output elided: {t.text.count(chr(10)) + 1} lines]") if t.role == "tool" and i < start else t for i, t in enumerate(turns)]
        return conv.with_turns(out)
    if style == "drop_tools":  # tool calls and results removed, summary as an assistant note
        kept = [t for t in turns[1:] if t.role != "tool" and not t.calls]
        return conv.with_turns([first, Turn("assistant", "Summary of my work so far: " + text)] + kept[-1:])
    if style == "assistant_bullets":
        return conv.with_turns([first, Turn("assistant", text)] + tail)
    if style == "middle_out":  # no summary: the middle of the history is cut
        return conv.with_turns([first] + tail)
    if style == "partial_truncate":  # every old tool output cut to its first characters
        out = [replace(t, text=t.text[:24] + " …[truncated]") if t.role == "tool" and i < start and len(t.text) > 24 else t for i, t in enumerate(turns)]
        return conv.with_turns(out)
    if style == "summary_in_tool":
        call = Turn("assistant", "", calls=(ToolCall("call_summarize", "summarize_task", {"context": "checkpoint"}),))
        res = Turn("tool", "This session is being continued from a previous conversation that ran out of context. " + text, call_id="call_summarize", tool_name="summarize_task")
        return conv.with_turns([first, call, res] + tail)
    if style == "claude_code":
        return conv.with_turns(
            [Turn("user", "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:\n" + text)] + tail
        )
    # codex
    return conv.with_turns([first, Turn("user", "Another language model started to solve this problem and produced a summary of its thinking process. " + text)] + tail)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class HeldOutCase:
    case: str
    family: str
    style: str
    mode: str
    dialect: str
    before: dict[str, Any]
    after: dict[str, Any]
    dropped: tuple[str, ...]
    dropped_secrets: int
    dropped_regen: tuple[str, ...]
    required: tuple[str, ...] = field(default=())

    @property
    def destructive(self) -> bool:
        return bool(self.dropped) or self.dropped_secrets > 0

    def label(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "family": self.family,
            "style": self.style,
            "mode": self.mode,
            "dialect": self.dialect,
            "destructive": self.destructive,
            "dropped_nonregen": list(self.dropped),
            "dropped_regen": list(self.dropped_regen),
            "nonregen": list(self.required),
        }


def _render(conv: Conversation, dialect: str) -> dict[str, Any]:
    if dialect == "pasted_aider":
        return conv.to_openai()
    if dialect == "pasted_cline":
        return conv.to_anthropic()
    return conv.body(dialect)


def _one(i: int, batch: str = "a") -> HeldOutCase:
    rng = random.Random(f"heldout-case:{batch}:{i}")
    table = {"a": FAMILIES, "b": FAMILIES_B, "c": FAMILIES_C, "d": FAMILIES_D}[batch]
    styles = STYLES_D if batch == "d" else STYLES
    fams = list(table)
    family = fams[i % len(fams)]
    style = styles[(i // len(fams)) % len(styles)]
    dialect = DIALECTS[(i // (len(fams) * len(styles))) % len(DIALECTS)] if i >= len(fams) * len(styles) else rng.choice(DIALECTS)
    mode = rng.choice(MODES)
    conv, labels = table[family](_Fam(family, i))
    if dialect.startswith("pasted_"):
        conv = pasted(conv, "aider" if dialect == "pasted_aider" else "cline")
    plain = [lb for lb in labels if not lb.secret]
    refs, _ = _refs(plain, mode, rng)
    keep = rng.randint(1, 3)
    if style in ("tool_digest", "middle_out", "partial_truncate"):
        mode = "implicit"
    after = compact_heldout(conv, style, refs, keep)
    text = after.text_of()
    gone = tuple(sorted(lb.value for lb in plain if lb.required and not _visible(lb.value, text)))
    gone_secret = sum(1 for lb in labels if lb.secret and not _visible(lb.value, text))
    gone_regen = tuple(sorted(lb.value for lb in plain if not lb.required and not _visible(lb.value, text)))
    return HeldOutCase(
        f"{ {'a': 'h', 'b': 'g', 'c': 'k', 'd': 'm'}[batch]}{i:04d}", family, style, mode, dialect, _render(conv, dialect), _render(after, dialect),
        gone, gone_secret, gone_regen, tuple(lb.value for lb in plain if lb.required),
    )


def generate(n: int = 340, batch: str = "a") -> list[HeldOutCase]:
    """``n`` cases of batch ``a`` (:data:`FAMILIES`), ``b`` (:data:`FAMILIES_B`) or ``c``
    (:data:`FAMILIES_C`)."""
    return [_one(i, batch) for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write the held-out corpus in the shared corpus's format")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("-n", type=int, default=340)
    ap.add_argument("--batch", choices=("a", "b", "c", "d"), default="a")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    cases = generate(a.n, a.batch)
    for c in cases:
        (a.out / f"{c.case}.before.json").write_text(json.dumps(c.before, indent=1), encoding="utf-8")
        (a.out / f"{c.case}.after.json").write_text(json.dumps(c.after, indent=1), encoding="utf-8")
    (a.out / "labels.json").write_text(json.dumps([c.label() for c in cases], indent=1), encoding="utf-8")
    print(f"wrote {len(cases)} cases to {a.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
