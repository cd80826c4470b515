"""Steps found in text (PRINCIPLES §2: the role that carries a step's output does not
matter) and the evidence the provenance rules read around a value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.dialects import from_openai_chat
from proxy.core.identifiers import extract_snapshot
from proxy.core.identifiers.commands import classify_call, classify_command
from proxy.core.identifiers.evidence import (
    creates,
    identity_label,
    is_history,
    link_keys,
    output_says_changed,
    preexisting_line,
    prior_marked,
    scope_reference,
)
from proxy.core.identifiers.steps import GATE_NOTE, PASTED_OUTPUT, text_steps

LEASE = "694d7a2c3f1b8e15"


@pytest.mark.parametrize(
    "text,command,tool,output",
    [
        (f"I ran this command:\n\netcdctl lease grant 60\n\nAnd got this output:\n\nlease {LEASE} granted\n", "etcdctl lease grant 60", None, f"lease {LEASE} granted"),
        (f"[execute_command for 'etcdctl lease grant 60'] Result:\nCommand executed.\nOutput:\nlease {LEASE} granted", "etcdctl lease grant 60", "execute_command", f"lease {LEASE} granted"),
        (f"```\n$ etcdctl lease grant 60\nlease {LEASE} granted\n```", "etcdctl lease grant 60", None, f"lease {LEASE} granted"),
        (f"ops@bastion:~$ etcdctl lease grant 60\nlease {LEASE} granted", "etcdctl lease grant 60", None, f"lease {LEASE} granted"),
        (f"Action: leases_grant\nAction Input: {{\"ttl\": 60}}\nObservation: lease {LEASE} granted", None, "leases_grant", f"lease {LEASE} granted"),
        (f"Output of `etcdctl lease grant 60`:\n```\nlease {LEASE} granted\n```", "etcdctl lease grant 60", None, f"lease {LEASE} granted"),
        (f"Here is the output:\n```\nlease {LEASE} granted\n```", None, PASTED_OUTPUT, f"lease {LEASE} granted"),
    ],
)
def test_pasted_steps(text: str, command: str | None, tool: str | None, output: str) -> None:
    steps = [s for s in text_steps(text) if s.command or s.tool]
    assert len(steps) == 1, steps
    (s,) = steps
    assert s.command == command and s.tool == tool
    assert text[s.out_start : s.out_end].strip() == output


def test_prose_is_no_step_and_xml_calls_have_no_output() -> None:
    (prose,) = text_steps("The customer was charged twice; refund them.")
    assert prose.command is None and prose.tool is None
    xml = "<execute_command>\n<command>etcdctl lease grant 60</command>\n</execute_command>"
    (call,) = text_steps(xml)
    assert call.command == "etcdctl lease grant 60" and call.out_start == call.out_end


def _snap(*texts: tuple[str, str]) -> list[object]:
    s = from_openai_chat({"messages": [{"role": r, "content": t} for r, t in texts]})
    return list(extract_snapshot(s, cache=None))


def test_pasted_state_change_mints_but_prose_does_not() -> None:
    minted = _snap(("user", f"I ran this command:\n\netcdctl lease grant 60\n\nAnd got this output:\n\nlease {LEASE} granted with TTL(60s)\n"))
    assert [(i.value, i.regenerable, i.why) for i in minted if i.value == LEASE] == [(LEASE, False, "2a")]
    said = _snap(("user", f"The lease {LEASE} was granted yesterday."))
    assert all(i.regenerable for i in said if i.value == LEASE)


def test_a_numeric_job_handle_pasted_after_its_noun_is_what_the_submission_made() -> None:
    """``Submitted batch job 1277938``: a job handle with no vendor shape, written after its
    noun (PRINCIPLES §1), minted by the pasted ``sbatch`` (§2a); the same number listed by
    ``squeue`` or counted (``job 1048576 bytes``) is not."""
    job = "1277938"
    submitted = _snap(("user", f"$ sbatch --partition=a100 --job-name=ft train_ft.sh\nSubmitted batch job {job}"))
    assert [(i.value, i.regenerable, i.why) for i in submitted] == [(job, False, "2a")]
    listed = _snap(("user", f"$ squeue -u praman\nlast job {job} is pending"))
    assert all(i.regenerable for i in listed if i.value == job)
    counted = _snap(("user", f"$ sbatch train.sh\nthe job {job} bytes of output so far"))
    assert [i.value for i in counted] == []


def test_a_react_action_of_a_shell_tool_is_its_command() -> None:
    """A ReAct trace's ``Action: bash`` carries its command line in ``Action Input``: the
    step is that command (an ``--async`` resize mints its operation), not prose."""
    op = "operation-9688367708652-69966ab9-928f9a29-c25bfcf5"
    trace = (
        "Thought: resize the pool.\nAction: bash\n"
        "Action Input: gcloud container clusters resize prod-eu --node-pool analytics --num-nodes 6 --async\n"
        f"Observation: name: {op}\nstatus: RUNNING\nThought: poll it."
    )
    minted = [i for i in _snap(("assistant", trace)) if i.value == op]
    assert [(i.regenerable, i.why) for i in minted] == [(False, "2a")]
    listed = trace.replace("clusters resize prod-eu --node-pool analytics --num-nodes 6 --async", "operations list")
    assert all(i.regenerable for i in _snap(("assistant", listed)) if i.value == op)


def test_a_generated_name_is_minted_only_by_the_step_that_made_it() -> None:
    """``generateName``: the created job's name is not in the call (PRINCIPLES §2a, §3b);
    the same shape in a listing, or a name the call gave, is readable again."""
    created = _snap(("user", "$ kubectl create -f k8s/migrate-job.yaml -n shop\njob.batch/migrate-23mt8 created"))
    assert [i.why for i in created if i.value.endswith("migrate-23mt8")] == ["2a"]
    listed = _snap(("user", "$ kubectl get jobs -n shop\nmigrate-23mt8   0/1   8s"))
    assert all(i.regenerable for i in listed if "migrate-23mt8" in i.value)
    named = _snap(("user", "$ kubectl create job migrate-api -n shop --image=api\njob.batch/migrate-api created"))
    assert all(i.regenerable for i in named if "migrate-api" in i.value)


def test_the_gates_own_note_stays_required() -> None:
    note = (
        "[compaction-gate: identifiers preserved from before this conversation was compacted]\n"
        "The summary of earlier turns dropped these values.\n"
        f"- `lease {LEASE}` — lease_id (not regenerable); from tool result of bash at message 3\n"
        "[/compaction-gate]"
    )
    ids = _snap(("user", "Summary: the agent holds a lease."), ("user", note))
    (i,) = [i for i in ids if i.value == LEASE]
    assert i.regenerable is False and i.why == "2*"
    assert GATE_NOTE == "compaction-gate"


# --------------------------------------------------------------------------- evidence


@pytest.mark.parametrize(
    "text,said",
    [
        ("deployment.apps/api created", True),
        ("INFO  [alembic.runtime.migration] Running upgrade a -> b", True),
        ('{"status": "pending", "id": "op-1"}', True),
        ("HTTP/1.1 201 Created", True),
        ("{ acknowledged: true, matchedCount: 1, modifiedCount: 1 }", True),
        ("UPDATE 1", True),
        ("Plan: 1 to add (dry run)", False),
        ("NAME   READY   STATUS\napi    1/1     Running", None),
    ],
)
def test_output_says_changed(text: str, said: bool | None) -> None:
    assert output_says_changed(text) is said


def test_creates_vs_modifies() -> None:
    assert creates(None, "aws acm request-certificate --domain-name x.io", "")
    assert creates("payments_create_intent", None, "")
    assert not creates(None, "aws cloudformation update-stack --stack-name web", "{}")
    assert creates(None, "kubectl apply -f job.yaml", "job.batch/migrate created")


def test_link_keys_name_resources_not_verbs_flags_or_scopes() -> None:
    keys = link_keys("bash", "kubectl -n shop get deploy/api -o json", "", ())
    assert {"deploy/api", "api"} <= keys and "shop" not in keys and "json" not in keys
    assert "billing-v2" in link_keys("bash", "kafka-consumer-groups --bootstrap-server k:9092 --describe --group billing-v2", "", ())
    assert "@git" in link_keys("bash", "git rev-parse HEAD", "", ("git",))
    assert "checkout-v2" in link_keys("flags_get", None, json.dumps({"key": "checkout-v2", "env": "prod"}), ())


def test_history_prior_preexisting_identity() -> None:
    assert is_history(None, "git log --oneline -5") and not is_history(None, "git rev-parse HEAD")
    text = "deployment.apps/api image updated\nprevious image: reg/api@sha256:abc"
    assert prior_marked(text, text.index("reg/"), len(text))
    up = "Running upgrade 05796fe56550 -> 74d5481968de, add"
    assert prior_marked(up, 16, 28) and not prior_marked(up, 32, 44)
    tf = "aws_db_instance.orders: Modifying... [id=db-ABC]"
    assert preexisting_line(tf, tf.index("db-ABC"))
    assert not preexisting_line("aws_instance.x: Creation complete after 2s [id=i-0abc]", 40)
    j = '{"id": "pi_x", "payment_intent": "pi_y"}'
    assert identity_label(j, j.index("pi_x")) and not identity_label(j, j.index("pi_y"))


@pytest.mark.parametrize(
    "text,prior",
    [
        ('"previous_offset": 7259834', True),
        ('"oldValue": 7259834', True),
        ('"old-image": 7259834', True),
        ('"folder": 7259834', False),
        ('"oldest": 7259834', False),
        ('"new_offset": 7259834', False),
    ],
)
def test_a_prior_word_marks_a_key_in_any_case_style(text: str, prior: bool) -> None:
    i = text.index("7259834")
    assert prior_marked(text, i, i + 7) is prior


def test_a_table_column_headed_by_a_prior_word_is_prior_state() -> None:
    table = "TOPIC   PARTITION  PRIOR-OFFSET  CURRENT-OFFSET\norders  0          1191061       0\n"
    i = table.index("1191061")
    assert prior_marked(table, i, i + 7)
    j = table.index("0\n", i + 7)
    assert not prior_marked(table, j, j + 1)


def test_rpk_seek_keeps_the_offsets_it_moved_from_required() -> None:
    """``rpk group describe`` then ``rpk group seek``: the offsets before the seek are
    the rollback target (PRINCIPLES §2b), each bound to its partition (§4) — also in
    rpk's table, which has no group column."""
    describe = (
        "$ rpk group describe billing\nGROUP        billing\nSTATE        Empty\n\n"
        "TOPIC   PARTITION  CURRENT-OFFSET  LOG-START-OFFSET  LOG-END-OFFSET  LAG\n"
        "orders  0          1191061         0                 1191783         722\n"
    )
    seek = "$ rpk group seek billing --to start --topics orders\nTOPIC   PARTITION  PRIOR-OFFSET  CURRENT-OFFSET\norders  0          1191061       0\n"
    offsets = [i for i in _snap(("user", describe), ("user", seek)) if i.kind == "kafka_offset" and i.source.message_index == 0]
    assert [(i.norm, i.why) for i in offsets] == [("orders:0@1191061", "2b")]


def test_offsets_a_reset_reports_as_previous_are_prior_state() -> None:
    """An MCP reset tool's JSON names each partition's previous offset: the rollback
    target (PRINCIPLES §2b), bound to its partition (§4); the new offsets are read again."""
    out = json.dumps({"group": "fraud-scorer", "topic": "payments", "partitions": [
        {"partition": 0, "previous_offset": 7259834, "new_offset": 0},
        {"partition": 1, "previous_offset": 6602262, "new_offset": 0},
    ]}, indent=2)
    s = from_openai_chat({"messages": [
        {"role": "user", "content": "Reset fraud-scorer to earliest."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "mcp__kafka__reset_offsets", "arguments": json.dumps({"group": "fraud-scorer", "to": "earliest"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": out},
    ]})
    offsets = [i for i in extract_snapshot(s, cache=None) if i.kind == "kafka_offset"]
    assert sorted((i.norm, i.why) for i in offsets) == [(":0@7259834", "2b"), (":1@6602262", "2b")]


def test_a_receipt_handle_is_issued_by_the_step_that_printed_it() -> None:
    """A Pub/Sub pull leases the messages it returns: their ack ids exist nowhere else,
    though no verb list knows ``subscriptions pull`` (PRINCIPLES §2a, §4). A handle the
    user only mentions is no step's output."""
    ack = "RkhRNxkIaFEOT14jPzUgKEUQAggUBXx9cEFLdV1adxkHY3ZcQFfEe2lz"
    pulled = _snap(("user", f'$ gcloud pubsub subscriptions pull orders-dlq-sub --format=json\n[{{"ackId": "{ack}", "message": {{"data": "e30="}}}}]'))
    assert [(i.kind, i.why) for i in pulled if i.value == ack] == [("receipt_handle", "2a")]
    said = _snap(("user", f'Earlier I saw "ackId": "{ack}" in the console.'))
    assert all(i.regenerable for i in said if i.value == ack)


def test_a_value_the_change_restates_is_its_subject_not_its_prior_state() -> None:
    """A read shows migration version 3 and its recorded checksum; ``flyway repair``
    rewrites the checksum *for version 3*: the checksum before it is the rollback target
    (PRINCIPLES §2b), the version it names again is what it acted on, not a state it
    replaced."""
    validate = (
        "$ flyway -environment=prod validate\nERROR: Validate failed\n"
        "Migration checksum mismatch for migration version 3\n"
        "-> Applied to database : 1251235302\n-> Resolved locally    : -938692586\n"
    )
    repair = (
        "$ flyway -environment=prod repair\n"
        "Repairing Schema History table for version 3 (Description: add index, Checksum: -938692586)\n"
        'Successfully repaired schema history table "public"."flyway_schema_history"\n'
    )
    ids = _snap(("user", validate), ("user", repair))
    why = {i.value: i.why for i in ids if i.source.message_index == 0}
    assert why["1251235302"] == "2b"
    assert why["3"] != "2b" and why["-938692586"] != "2b"


def _calls(*steps: tuple[str, dict[str, object], str]) -> list[Any]:
    """A conversation of tool calls (name, arguments, output), its identifiers judged."""
    msgs: list[dict[str, object]] = [{"role": "user", "content": "Go."}]
    for k, (tool, args, out) in enumerate(steps):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{k}", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": out})
    return list(extract_snapshot(from_openai_chat({"messages": msgs}), cache=None))


EVENT = "74953f374922a93017bd36ded5029665"
OLD_CUS, NEW_CUS = "cus_P5xBm9izHJZWWn", "cus_UkKRHH4c9f2w2d"


def test_an_entity_id_read_before_an_unrelated_change_is_no_prior_state() -> None:
    """An event read, then its issue resolved: the event's id is no state the change
    replaced (PRINCIPLES §2b is about the value a change re-points), it can be read
    again (§3a)."""
    ids = _calls(
        ("mcp__sentry__get_event", {"issue_id": "4821907"}, json.dumps({"eventID": EVENT, "title": "TypeError"})),
        ("mcp__sentry__update_issue", {"issue_id": "4821907", "status": "resolved"}, '{"status": "resolved"}'),
    )
    assert [i.regenerable for i in ids if i.value == EVENT] == [True]


def test_a_reference_a_change_re_points_is_prior_state() -> None:
    """The billing customer an update replaces with another customer id: the old one is
    the rollback target (§2b), though it is an entity's id."""
    ids = _calls(
        ("get_account", {"id": 5273}, json.dumps({"id": 5273, "billing_customer": OLD_CUS})),
        ("update_account", {"id": 5273, "billing_customer": NEW_CUS}, '{"updated": 1}'),
    )
    assert [i.why for i in ids if i.value == OLD_CUS] == ["2b"]


def test_the_id_a_change_names_picks_its_object_over_a_shared_name() -> None:
    """Two records share the name ``api.acme.io``; the change names one by its id: the
    other record's id is a sibling, not the state that changed."""
    rec, other = "b63066e578edbcc82c6d657b70f046ef", "2cd936ec81adafceebd49958293e9f34"
    listing = json.dumps({"result": [
        {"id": rec, "name": "api.acme.io", "type": "CNAME", "content": "lb-blue.example.net"},
        {"id": other, "name": "api.acme.io", "type": "TXT", "content": "owner=platform"},
    ]}, indent=1)
    ids = _calls(
        ("dns_list_records", {"name": "api.acme.io"}, listing),
        ("dns_update_record", {"record_id": rec, "name": "api.acme.io", "content": "lb-green.example.net", "zone_id": "9c6fe786ebff2edc6684f1feefc9b714"}, '{"success": true}'),
    )
    assert all(i.regenerable for i in ids if i.value == other)


@pytest.mark.parametrize(
    "text,value,own,scope",
    [
        ('{"StackId": "arn:aws:cloudformation:us-east-1:1:stack/web/6f1c", "x": 1}', "arn:", frozenset({"aws", "ec2"}), True),
        ("ID         VPC UUID                              Name\n3f2a       0c1de9f4-9d0b-4a55-8a0f-6bd02a4b4d51  web", "0c1de9f4", frozenset({"doctl", "compute", "droplet", "create"}), True),
        ('{"Vpc": {"VpcId": "vpc-0a1b2c3d4e5f60718"}}', "vpc-0a1b", frozenset({"aws", "ec2", "create", "vpc"}), False),
        ('{"InstanceId": "i-0a1b2c3d4e5f60718"}', "i-0a1b", frozenset({"aws", "ec2", "run", "instances"}), False),
        ('{"bot_id": "B06TZ7Q9L", "ts": "1"}', "B06TZ", frozenset({"slack", "post"}), True),
    ],
)
def test_a_scope_or_actor_id_is_a_reference_unless_the_step_acts_on_it(text: str, value: str, own: frozenset[str], scope: bool) -> None:
    """In a creating step's output, the VPC, stack or bot of what it made existed before
    it (PRINCIPLES §3b); ``create-vpc``'s own ``VpcId`` is what it made (§2a)."""
    assert scope_reference(text, text.index(value), own) is scope


def test_a_create_keeps_its_own_id_and_not_the_vpc_it_was_placed_in() -> None:
    vpc, inst = "vpc-0c1de9f49d0b4a558", "i-0fa2b3c4d5e6f7081"
    out = json.dumps({"Instances": [{"InstanceId": inst, "VpcId": vpc, "State": {"Name": "pending"}}]})
    ids = _calls(("bash", {"command": "aws ec2 run-instances --image-id ami-0abc --count 1"}, out))
    why = {i.value: (i.regenerable, i.why) for i in ids}
    assert why[inst] == (False, "2a")
    assert why[vpc][0] is True


def test_the_id_column_of_a_cli_table_is_a_numeric_id() -> None:
    out = "ID           Name     Public IPv4       Status\n303640093    web-3    164.92.209.154    new\n"
    ids = _calls(("bash", {"command": "doctl compute droplet create web-3 --size s-1vcpu-1gb --image ubuntu-24-04-x64"}, out))
    assert [(i.kind, i.regenerable) for i in ids if i.value == "303640093"] == [("numeric_id", False)]


def test_a_backup_mints_its_snapshot_not_the_parent_a_listing_showed() -> None:
    """``restic snapshots`` lists the nightly snapshot (a read, §3a); the backup names it as
    its parent and prints the snapshot it saved (§2a) — a bare 8-hex id after its noun."""
    listing = "ID        Time                 Host\n------------------------------------\n670ef103  2026-12-06 02:00:14  db-03\n------------------------------------\n1 snapshots"
    backup = "using parent snapshot 670ef103\nprocessed 21029 files, 48.661 GiB in 4:12\nsnapshot 26afc77b saved"
    ids = _calls(("bash", {"command": "restic snapshots --latest 1"}, listing), ("bash", {"command": "restic backup /var/lib/postgresql"}, backup))
    why = {i.value: i.regenerable for i in ids if i.source.message_index in (2, 4)}
    assert why == {"670ef103": True, "26afc77b": False}


def _react(*turns: tuple[str, str]) -> list[Any]:
    """A ReAct trace whose observations come in messages of their own (thought + action,
    then ``Observation: …``), its identifiers judged."""
    msgs: list[dict[str, object]] = [{"role": "user", "content": "Go."}]
    for action, observation in turns:
        msgs.append({"role": "assistant", "content": f"Thought: next.\nAction: redis-cli\nAction Input: {action}"})
        msgs.append({"role": "user", "content": f"Observation: {observation}"})
    return list(extract_snapshot(from_openai_chat({"messages": msgs}), cache=None))


def test_an_observation_in_its_own_message_is_the_output_of_the_action_before_it() -> None:
    """``XADD`` answers the entry id it made, in the next message (PRINCIPLES §2: the role
    that carries a step's output does not matter; §2a). The group's last-delivered id read
    before is no state the append replaced: an append leaves what was read valid."""
    ids = _react(
        ("XINFO GROUPS jobs:reindex", '1) "name"\n2) "reindexers"\n3) "last-delivered-id"\n4) "1796432544127-0"'),
        ("XADD jobs:reindex * tenant northwind", '"1796691783380-0"'),
    )
    why = {i.value: (i.regenerable, i.why) for i in ids}
    assert why["1796691783380-0"] == (False, "2a")
    assert why["1796432544127-0"][0] is True


@pytest.mark.parametrize(
    "command,mutating",
    [
        ("redis-cli -h redis-jobs.internal -p 6379 XINFO GROUPS jobs:reindex", False),
        ("redis-cli XADD jobs:reindex * tenant northwind", True),
        ("redis-cli -n 2 DEL session:42", True),
        ("redis-cli --user ops GET feature:flags", False),
        ("redis-cli CONFIG SET maxmemory 2gb", True),
        ("redis-cli CONFIG GET maxmemory", False),
    ],
)
def test_redis_cli_commands_read_or_write(command: str, mutating: bool) -> None:
    assert classify_command(command).mutating is mutating


def test_a_change_set_names_the_stack_it_was_made_for_as_a_reference() -> None:
    """``create-change-set`` makes the change set; the stack it names existed before, though
    its template file is ``stack.yaml`` (an option's value is not what the step acts on)."""
    cs = "arn:aws:cloudformation:us-east-1:731294058823:changeSet/add-dlq/143fbe58-49c5-49f9-aa77-f2064ba7d41f"
    stack = "arn:aws:cloudformation:us-east-1:731294058823:stack/payments-api/8c5c2d1f-389b-47d5-8867-4fcb6455eff7"
    out = json.dumps({"Id": cs, "StackId": stack}, indent=4)
    cmd = "cd infra && aws cloudformation create-change-set --stack-name payments-api --change-set-name add-dlq --template-body file://infra/stack.yaml"
    why = {i.value: i.regenerable for i in _calls(("bash", {"command": cmd}, out))}
    assert why[cs] is False and why[stack] is True


@pytest.mark.parametrize(
    "tool,args,mutating",
    [
        ("python_exec", {"code": "exp = mlflow.get_experiment_by_name('churn-v3')\nprint(exp.experiment_id)"}, False),
        ("python_exec", {"code": "with mlflow.start_run(run_name='x') as run:\n    mlflow.log_metrics(m)"}, True),
        ("mongosh_eval", {"db": "notify", "script": "db.templates.find({name: /winter/i}).toArray()"}, False),
        ("mongosh_eval", {"db": "notify", "script": "db.campaigns.insertOne({name: 'Winter'})"}, True),
        # a bare verb is a builtin as often as a change: the tool's name decides, as before
        ("python_exec", {"code": "seen = set(); print(seen)"}, True),
    ],
)
def test_a_code_running_tool_does_what_its_code_calls(tool: str, args: dict[str, str], mutating: bool) -> None:
    """``python_exec`` names no verb of what ran; the calls of its code do (PRINCIPLES §2)."""
    assert classify_call(tool, json.dumps(args)).mutating is mutating


def test_an_insert_mints_its_document_and_leaves_what_was_read_valid() -> None:
    """``insertOne`` adds a document (its ``insertedId`` exists nowhere else, §2a); the
    templates a find listed before are no state it replaced (an append verb: §2b)."""
    listing = "[\n  { _id: ObjectId('aab4da68d9e46125ece0fb28'), name: 'winter-sale-2025' },\n  { _id: ObjectId('c7a95b520d3804ec17fdbe0e'), name: 'winter-sale-2025-de' }\n]"
    insert = "db.campaigns.insertOne({name: 'Winter', templateId: ObjectId('aab4da68d9e46125ece0fb28')})"
    ids = _calls(
        ("mongosh_eval", {"db": "notify", "script": "db.templates.find({name: /winter/i}).toArray()"}, listing),
        ("mongosh_eval", {"db": "notify", "script": insert}, "{\n  acknowledged: true,\n  insertedId: ObjectId('2be644344f286c70945f40db')\n}"),
    )
    why = {i.value: i.regenerable for i in ids}
    assert why["2be644344f286c70945f40db"] is False
    assert why["c7a95b520d3804ec17fdbe0e"] is True


@pytest.mark.parametrize(
    "tool,command,reason",
    [
        ("aws_cli", "kms create-key --key-usage ENCRYPT_DECRYPT", "aws kms create-key"),
        ("aws_cli", "kms list-aliases --output text", "aws kms list-aliases"),
        ("kubectl", "get pods -n web", "kubectl get"),
        ("run_kubectl", "kubectl delete pod web-1", "kubectl delete"),
    ],
)
def test_a_tool_named_after_a_cli_runs_that_cli(tool: str, command: str, reason: str) -> None:
    """``aws_cli`` with ``{"command": "kms create-key …"}`` runs ``aws kms create-key``."""
    assert classify_call(tool, json.dumps({"command": command})).reason == reason


def test_a_celery_call_mints_its_task_and_leaves_the_active_tasks_as_read() -> None:
    active = "adb4d96b-0f06-4f63-8f1c-c6cf49a30dad\tacme.tasks.billing.close_period\t1796637203.918"
    ids = _calls(
        ("terminal", {"cmd": "celery -A acme.worker inspect active --json | jq -r '.[][] | [.id, .name] | @tsv'"}, active),
        ("terminal", {"cmd": "celery -A acme.worker call acme.tasks.search.rebuild_index --queue search"}, "bd907fda-043b-44ea-9841-d79789bc7598"),
    )
    why = {i.value: i.regenerable for i in ids}
    assert why == {"adb4d96b-0f06-4f63-8f1c-c6cf49a30dad": True, "bd907fda-043b-44ea-9841-d79789bc7598": False}
    assert classify_command("celery -A acme.worker control revoke bd907fda").mutating is True


@pytest.mark.parametrize(
    "command,mutating",
    [
        ("bq --location=EU query --nosync --use_legacy_sql=false < sql/backfill.sql", True),
        ("bq query --use_legacy_sql=false 'SELECT 1'", False),
        ("acmectl report list --async", True),
    ],
)
def test_a_command_run_in_the_background_starts_a_job(command: str, mutating: bool) -> None:
    """``--nosync``/``--async``: even a query starts a job whose id is what it made (§2a)."""
    assert classify_command(command).mutating is mutating


@pytest.mark.parametrize(
    "query,mutating",
    [
        ("mutation($input: ProductInput!) { productCreate(input: $input) { product { id } } }", True),
        ("{ locations(first: 5) { nodes { id name } } }", False),
        ("query Shop { shop { name } }", False),
        ("# refresh\nmutation { inventorySetQuantities(input: {}) { userErrors { message } } }", True),
    ],
)
def test_a_graphql_tool_reads_a_query_and_writes_a_mutation(query: str, mutating: bool) -> None:
    assert classify_call("shopify_graphql", json.dumps({"query": query})).mutating is mutating


def test_a_migration_listing_is_history_but_its_last_applied_is_state() -> None:
    """``showmigrations`` then ``migrate``: the migration applied last is what the change
    moves from (§2b); the ones listed before it are the schema's history (§3d)."""
    listing = "billing\n [X] 0001_initial\n [X] 0041_invoice_customer_ref_idx\n [X] 0042_invoice_due_date\n"
    ids = _calls(
        ("bash", {"command": "python manage.py showmigrations billing"}, listing),
        ("bash", {"command": "python manage.py migrate billing"}, "Running migrations:\n  Applying billing.0043_invoice_tax_region... OK\n"),
    )
    why = {i.value: i.why for i in ids if i.source.message_index == 2}
    assert why["0042_invoice_due_date"] == "2b"
    assert why["0001_initial"] != "2b" and why["0041_invoice_customer_ref_idx"] != "2b"


def test_a_version_is_prior_state_only_of_a_change_that_may_move_it() -> None:
    """The release an event was seen in, then its issue resolved: no version the change
    moves from (§2b needs a change that may re-point a value of its kind). A reset to
    another commit moves the branch from the sha read before it."""
    release, head, target = "b04c9f8cb94c6dc8d9221e5d0403791def6051a2", "4c1e0f7a9b2d3e5f60718293a4b5c6d7e8f90123", "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"
    ids = _calls(
        ("mcp__sentry__get_event", {"issue_id": "7952506382", "event": "latest"}, json.dumps({"eventID": "5a58ee3636598748b8818de005b2dcc4", "release": release})),
        ("mcp__sentry__update_issue", {"issue_id": "7952506382", "status": "resolved"}, '{"status": "resolved"}'),
    )
    assert [i.why for i in ids if i.value == release] != ["2b"]
    assert all(i.regenerable for i in ids if i.value == release)
    ids = _calls(
        ("bash", {"command": "git rev-parse HEAD"}, head),
        ("bash", {"command": f"git reset --hard {target}"}, f"HEAD is now at {target[:7]} fix"),
    )
    assert [i.why for i in ids if i.value == head] == ["2b"]


def test_a_new_replication_slot_mints_its_lsn_and_leaves_the_wal_positions_read() -> None:
    """``pg_create_logical_replication_slot`` only adds (as ``CREATE PUBLICATION`` and
    ``INSERT`` do): the WAL positions read before stay valid (no §2b), and the LSN the new
    slot starts at is the position of what it made (§2a), not a state to read again."""
    def sql(q: str) -> dict[str, str]:
        return {"database": "orders", "sql": q}

    ids = _calls(
        ("run_sql", sql("SELECT slot_name, restart_lsn FROM pg_replication_slots;"), " slot_name      | restart_lsn\n----------------+-------------\n analytics_sync | 43/5428CEB1\n(1 row)"),
        ("run_sql", sql("CREATE PUBLICATION cdc_orders_pub FOR TABLE public.orders;"), "CREATE PUBLICATION"),
        ("run_sql", sql("SELECT * FROM pg_create_logical_replication_slot('cdc_orders', 'pgoutput');"), " slot_name  |     lsn\n------------+-------------\n cdc_orders | 44/8034B464\n(1 row)"),
    )
    why = {i.value: i.regenerable for i in ids}
    assert why == {"43/5428CEB1": True, "44/8034B464": False}


@pytest.mark.parametrize(
    "sql,domains",
    [
        ("INSERT INTO audit(msg) VALUES ('x');", {"db:additive", "tool:sql:additive"}),
        ("INSERT INTO t(id) VALUES (1) ON CONFLICT (id) DO UPDATE SET n = 2;", {"db", "tool:sql"}),
        ("CREATE OR REPLACE VIEW v AS SELECT 1;", {"db", "tool:sql"}),
        ("CREATE INDEX i ON t(a); UPDATE t SET a = 1;", {"db", "tool:sql"}),
    ],
)
def test_sql_that_only_adds_touches_its_domain_additively(sql: str, domains: set[str]) -> None:
    cls = classify_call("run_sql", json.dumps({"sql": sql}))
    assert cls.mutating is True and set(cls.domains) == domains


def test_a_filter_in_braces_is_no_graphql_query_on_a_tool_that_does_not_say_graphql() -> None:
    assert classify_call("mongo_delete_many", json.dumps({"query": "{status: 'stale'}"})).mutating is True


def test_a_message_sent_is_minted_and_the_services_listed_before_stay_as_read() -> None:
    """``messages:create`` sends one more message (its SID is what it made, §2a); the other
    messaging service listed before it is no state it replaced, though the create names a
    service of that kind (a create only adds)."""
    services = "SID                                 Friendly Name\nMG8dd82854f345b89eff73cbc0326de00a  ops-alerts\nMGee8aa7397aa30732b03322e59963218c  marketing-eu"
    sent = "SID                                 From  To             Status\nSM1b2faa473fa2580d66afebd01d80bc1b  null  +447700900418  accepted"
    ids = _calls(
        ("bash", {"command": "twilio api:messaging:v1:services:list --properties sid,friendlyName"}, services),
        ("bash", {"command": "twilio api:core:messages:create --messaging-service-sid MG8dd82854f345b89eff73cbc0326de00a --to '+447700900418' --body 'lag'"}, sent),
    )
    why = {i.value: i.regenerable for i in ids if i.source.message_index in (2, 4)}
    assert why == {"MG8dd82854f345b89eff73cbc0326de00a": True, "MGee8aa7397aa30732b03322e59963218c": True, "SM1b2faa473fa2580d66afebd01d80bc1b": False}


def test_a_reference_read_before_a_change_is_prior_state_only_if_the_change_names_it() -> None:
    """A ticket's ``requester_id`` read before a bulk status change is no state that change
    replaced (it re-points no requester); read before a change that reassigns tickets
    (``assignee_id``) the old assignee is (PRINCIPLES §2b). A change that states nothing
    itself (a configuration file) may re-point anything it read."""
    requester, assignee = "401000338107", "360011223344"
    listing = json.dumps({"results": [{"id": 48301, "status": "open", "requester_id": int(requester), "assignee_id": int(assignee)}]})
    read = ("zendesk", {"method": "GET", "path": "/api/v2/search.json?query=tags:outage"}, listing)
    solved = ("zendesk", {"method": "PUT", "path": "/api/v2/tickets/update_many.json?ids=48301", "body": {"ticket": {"status": "solved"}}}, '{"job_status": {"status": "queued"}}')
    why = {i.value: i.why for i in _calls(read, solved) if i.source.message_index == 2}
    assert why[requester] != "2b" and why[assignee] != "2b"
    moved = ("zendesk", {"method": "PUT", "path": "/api/v2/tickets/48301.json", "body": {"ticket": {"assignee_id": 360099887766}}}, '{"ticket": {"id": 48301}}')
    why = {i.value: i.why for i in _calls(read, moved) if i.source.message_index == 2}
    assert why[assignee] == "2b" and why[requester] != "2b"
    applied = ("zendesk", {"method": "PUT", "path": "/api/v2/tickets/48301.json", "data": "@ticket.json"}, '{"ticket": {"id": 48301}}')
    why = {i.value: i.why for i in _calls(read, applied) if i.source.message_index == 2}
    assert why[assignee] == "2b"


def test_a_reply_pasting_what_an_assistant_asked_for_is_that_commands_output() -> None:
    """An agent without tools asks the user to run a command and paste what it printed:
    the reply is that command's output (PRINCIPLES §2: the role that carries output does
    not matter), so a key ``gpg --full-generate-key`` made is minted (§2a), and the same
    text with no request before it is only a mention."""
    fpr = "D05612FA15D965A82AADCD0C5983FB81C95A082C"
    pasted = f"public and secret key created and signed.\n\npub   ed25519 2026-12-07 [SC]\n      {fpr}\nuid   Lena Vogt <lena@acme.io>"
    asked = _snap(("user", "Help me make a signing key."), ("assistant", "Run `gpg --full-generate-key` and paste the output here."), ("user", pasted))
    assert {(i.why, i.regenerable) for i in asked if i.value == fpr} == {("2a", False)}
    unasked = _snap(("user", "Help me make a signing key."), ("assistant", "Sure, GnuPG can do that."), ("user", pasted))
    assert all(i.regenerable for i in unasked if i.value == fpr)
    listed = _snap(("assistant", "Run `gpg --list-keys` and paste what it prints."), ("user", pasted))
    assert all(i.regenerable for i in listed if i.value == fpr)


def test_a_value_named_after_another_handle_of_the_same_output_is_that_handle() -> None:
    """``openpgp-revocs.d/<fingerprint>.rev`` holds no machine-made part but the
    fingerprint printed beside it: the fingerprint is the binding (§4), the path is
    derivable from it (§3b); a client secret made of an id and a random part of its own
    is a handle in its own right (§2a)."""
    fpr = "D4F27946BE753543A7E9C7C9C564912BE88CB257"
    rev = f"/home/lena/.gnupg/openpgp-revocs.d/{fpr}.rev"
    out = f"gpg: revocation certificate stored as '{rev}'\npublic and secret key created and signed.\n\npub   ed25519 2026-12-07 [SC]\n      {fpr}"
    why = {i.value: i.why for i in _calls(("bash", {"command": "gpg --batch --quick-generate-key 'Lena <l@acme.io>' ed25519 sign 2y"}, out))}
    assert why[fpr] == "2a" and why[rev] == "3b"
    pi = "pi_pb4DMaeFqLZs2alf1HJL9J1a"
    secret = f"{pi}_secret_n0kgk1PazNntxZVEXSfaUtx2"
    made = json.dumps({"id": pi, "client_secret": secret, "status": "requires_confirmation"})
    why = {i.value: i.why for i in _calls(("payments_create_intent", {"amount": 2500, "currency": "eur"}, made))}
    assert why[pi] == "2a" and why[secret] == "2a"


def test_git_commands_that_write_no_commit_print_commits_that_exist() -> None:
    """``git bisect`` checks out commits of a branch's history: it made none of them (§2a)
    and they stay reachable after the next move (§3d), where ``git stash`` writes a
    commit (§2a) and ``git reset --hard`` leaves the HEAD read before it unreachable (§2b)."""
    a, b = "e3a9c17f0b2d4e6a8c5f1b3d7e9a2c4f6b8d0e13", "1c6f8a3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d1f24"
    stash = "b7e41c9d2a6f08e35c1d97a4b2e6f0c83d5a1e29"
    why = {
        i.value: i.why
        for i in _calls(
            ("shell", {"cmd": "git stash push -u -m wip && git rev-parse stash@{0}"}, f"Saved working directory and index state On main: wip\n{stash}"),
            ("shell", {"cmd": "git bisect start && git bisect bad && git bisect good v2.3.0"}, f"Bisecting: 11 revisions left to test after this (roughly 4 steps)\n[{a}] cache: move ttl parsing"),
            ("shell", {"cmd": "make test >/dev/null; git bisect bad"}, f"Bisecting: 5 revisions left to test after this (roughly 3 steps)\n[{b}] cache: add metrics"),
            ("shell", {"cmd": "git bisect reset && git stash pop"}, "Previous HEAD position was 1c6f8a3 cache: add metrics\nSwitched to branch 'main'"),
        )
    }
    assert why[stash] == "2a"
    assert not why[a].startswith("2") and not why[b].startswith("2")
    head = "9d2b4f6a8c0e1d3f5a7b9c1e3d5f7a9b0c2e4f68"
    reset = _calls(("shell", {"cmd": "git rev-parse HEAD"}, head), ("shell", {"cmd": "git reset --hard HEAD~3"}, "HEAD is now at 5e2b7a1 release 2.4"))
    assert {i.why for i in reset if i.value == head} == {"2b"}


def test_code_that_lists_commits_is_a_history_listing() -> None:
    """``HfApi().list_repo_commits(…)`` is ``git log`` in code: its entries stay reachable
    after an upload adds a commit (§3d), while the revision ``model_info`` read as the
    repository's state before the upload is its rollback target (§2b)."""
    head, older = "2d4f6a8c0e1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f", "6b8d0f2a4c6e8a0b2d4f6a8c0e2b4d6f8a0c2e4b"
    info = ("shell", {"cmd": "python -c \"from huggingface_hub import HfApi; i=HfApi().model_info('acme/m'); print(i.sha)\""}, head)
    commits = ("shell", {"cmd": "python -c \"from huggingface_hub import HfApi; [print(c.commit_id, c.title) for c in HfApi().list_repo_commits('acme/m')]\""}, f"{head} v2.1 weights\n{older} model card")
    upload = ("shell", {"cmd": "python -c \"from huggingface_hub import HfApi; print(HfApi().upload_folder(repo_id='acme/m', folder_path='out/v3'))\""}, "CommitInfo(oid='8c1f2e3d4b5a69788f7e6d5c4b3a29180f7e6d5c')")
    why = {i.value: i.why for i in _calls(info, commits, upload)}
    assert why[head] == "2b" and not why[older].startswith("2")


def _snowflake(statement: str, handle: str) -> tuple[str, dict[str, object], str]:
    out = json.dumps({"data": [["Statement executed successfully."]], "statementStatusUrl": f"/api/v2/statements/{handle}", "statementHandle": handle})
    return ("snowflake_sql", {"statement": statement}, out)


def test_a_reads_own_receipt_is_no_state_and_a_status_url_is_its_handle() -> None:
    """A SELECT's ``statementHandle`` (and its status URL) is the read's own receipt, noise
    of read-only output (§3d), not state the ALTER after it replaced; a DDL statement's
    handle is what that statement left behind (§2a), and its status URL, which holds
    nothing but that handle, is the same binding (§4)."""
    select, swap = "01b4f3c6-0002-8d2f-0000-4a8b00135a40", "01b4f3c9-0002-8d2f-0000-4a8b00135b77"
    why = {
        i.value: i.why
        for i in _calls(
            _snowflake("SELECT COUNT(*) FROM MARTS.DIM_CUSTOMER_NEXT", select),
            _snowflake("ALTER TABLE MARTS.DIM_CUSTOMER SWAP WITH MARTS.DIM_CUSTOMER_NEXT", swap),
        )
    }
    assert not why[select].startswith("2") and not why[f"/api/v2/statements/{select}"].startswith("2")
    assert why[swap] == "2a" and why[f"/api/v2/statements/{swap}"] == "3b"


def test_an_entitys_own_version_is_its_state_not_a_reference() -> None:
    """``VersionId`` names no other entity: it is the object's state, which a ``put-object``
    replaces without naming it (§2b), unlike a reference such as ``KmsKeyId``."""
    prior, key = "B2oueEMtrtpkPMTpZLBgveg1z6MxYt86", "arn:aws:kms:us-east-1:111122223333:key/2c4e6a8b-0d1f-4e3a-9b5c-7d9e1f3a5b7c"
    head = json.dumps({"ContentLength": 2211, "VersionId": prior, "SSEKMSKeyId": key})
    put = json.dumps({"ETag": '"7c8051d75ba9e2912dc6790a8b18b819"', "VersionId": "oMEHb6kjdhVewz89IyIrFmEqdht2B0jh"})
    why = {
        i.value: i.why
        for i in _calls(
            ("bash", {"command": "aws s3api head-object --bucket acme-config --key prod/app.json"}, head),
            ("bash", {"command": "aws s3api put-object --bucket acme-config --key prod/app.json --body build/app.json"}, put),
        )
    }
    assert why[prior] == "2b" and why[key] != "2b"


def test_a_short_number_under_a_bare_id_key_is_what_a_create_made() -> None:
    """``{"id":84127,"message":"Annotation added"}``: five digits under ``id`` are the new
    annotation's identifier (§1, §2a); the same under ``port`` or with four digits is not."""
    out = '{"id":84127,"message":"Annotation added"}'
    cmd = "curl -s -X POST https://grafana.acme.dev/api/annotations -d '{\"dashboardUID\":\"cdlxq9k2m4pz\",\"text\":\"canary start\"}'"
    why = {i.value: i.why for i in _calls(("bash", {"command": cmd}, out))}
    assert why["84127"] == "2a"
    assert "4821" not in {i.value for i in _calls(("bash", {"command": cmd}, '{"id":4821}'))}


def test_a_command_given_to_a_user_who_pastes_its_output_is_a_step_with_arguments() -> None:
    """A user who offered to paste what it runs, an assistant that gives a ``curl … POST``
    with an idempotency key it made up, and the pasted reply: one state-changing step, so
    the key is first written into its arguments (§2c) and the order id it returned is
    minted (§2a). Without the offer or a request to paste, the code block is only text."""
    key, order = "0f6c2d9e-7a41-4b83-95e0-c3d8a1b7f264", "Tj6bQ3xW9kLmP2rYv8NcH5sDf7GzE"
    give = (
        "First create the order:\n\n```bash\ncurl -s https://connect.squareupsandbox.com/v2/orders -X POST "
        f"-H 'Content-Type: application/json' -d '{{\"idempotency_key\": \"{key}\", \"order\": {{\"location_id\": \"LH2B6Y8X0RW3E\"}}}}'\n```"
    )
    reply = json.dumps({"order": {"id": order, "location_id": "LH2B6Y8X0RW3E", "state": "OPEN"}})
    offer = "Bill the cafe through a Square order. Give me the curl commands one at a time; I'll paste the output."
    why = {i.value: i.why for i in _snap(("user", offer), ("assistant", give), ("user", reply))}
    assert why[key] == "2c" and why[order] == "2a"
    plain = {i.value: i.regenerable for i in _snap(("user", "Bill the cafe through a Square order."), ("assistant", give), ("user", reply))}
    assert plain[key] and plain[order]


def test_a_detached_jobs_id_in_a_one_column_result_is_what_it_started() -> None:
    """``IMPORT … WITH detached`` prints its job id as a one-column SQL result under
    ``job_id``: minted (§2a); a ``count`` printed the same way is no identifier."""
    job = "972384511809765377"
    out = f"        job_id\n----------------------\n  {job}\n(1 row)\n\nTime: 118ms"
    cmd = "cockroach sql --url \"$CRDB_URL\" -e \"IMPORT INTO orders (id, total) CSV DATA ('s3://acme/p1.csv') WITH detached\""
    assert {i.why for i in _calls(("execute_bash", {"command": cmd}, out)) if i.value == job} == {"2a"}
    counted = _calls(("execute_bash", {"command": "cockroach sql -e \"SELECT count(*) FROM orders\""}, "  count\n---------\n  4182207\n(1 row)"))
    assert [i.value for i in counted] == []


def test_review_cases_of_session_41_in_provenance() -> None:
    """A commit made under ``git -C dir`` is still a commit (§2a); a reference the change's
    tool name names is re-pointed (§2b); a key named after a query is no receipt."""
    sha = "4c1f2e3d4b5a69788f7e6d5c4b3a29180f7e6d5c"
    made = _calls(("bash", {"command": "git -C /srv/app commit -am fix && git -C /srv/app rev-parse HEAD"}, f"[main 4c1f2e3] fix\n 1 file changed\n{sha}"))
    assert {i.why for i in made if i.value == sha} == {"2a"}
    old = "usr_8f3Kq92LmZx4Tb"
    read = ("get_ticket", {"ticket_id": 48301}, json.dumps({"id": 48301, "requester_id": old}))
    moved = ("update_ticket_requester", {"ticket_id": 48301, "user": "usr_Q71nB2vX9kLm0p"}, '{"ok": true}')
    assert {i.why for i in _calls(read, moved) if i.value == old} == {"2b"}
    saved = "sq_8f3Kq92LmZx4Tb7c"
    tile = ("get_dashboard_tile", {"tile": 7}, json.dumps({"id": 7, "saved_query_id": saved}))
    repoint = ("update_dashboard_tile", {"tile": 7, "saved_query_id": "sq_Z71nB2vX9kLm0p3d"}, '{"ok": true}')
    assert {i.why for i in _calls(tile, repoint) if i.value == saved} == {"2b"}


def test_an_offer_to_paste_joins_only_commands_set_apart() -> None:
    """After a user offered to paste what it runs, a command mentioned inline in passing is
    not one it ran: its reply is no output of it."""
    offer = "I'll run whatever you give me and paste the output."
    order = "ord_8f3Kq92LmZx4Tb7c"
    said = _snap(("user", offer), ("assistant", "Later we could try `kubectl rollout undo deploy/web` if needed."), ("user", f"ok. the order is {order}"))
    assert all(i.regenerable for i in said if i.value == order)


def test_a_request_to_paste_may_come_before_its_command() -> None:
    """"Run this and paste the output:" and then the command in a block: the reply is that
    command's output (the same join as with the request after it)."""
    job = "1277938"
    asked = "Run this and paste the output:\n\n```\nsbatch --partition=a100 --job-name=ft train_ft.sh\n```"
    why = {i.value: i.why for i in _snap(("user", "Help me submit my fine-tune."), ("assistant", asked), ("user", f"Submitted batch job {job}"))}
    assert why[job] == "2a"
