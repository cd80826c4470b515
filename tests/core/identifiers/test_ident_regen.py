"""Regenerability: source rules, read-before-write, policy overrides, call linking."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.dialects import from_anthropic, from_openai_chat
from proxy.core.identifiers import (
    CallRecord,
    Identifier,
    RegenPolicy,
    Source,
    extract_snapshot,
    mark_regenerability,
    snapshot_calls,
)
from proxy.core.identifiers.callkinds import CREATE_VERBS, MODIFY_VERBS, READ_VERBS
from proxy.core.identifiers.commands import classify_call
from proxy.core.identifiers.evidence import link_keys, reports_failure
from proxy.core.messages import Part, Snapshot, make_message

SHA = "4ab09790de1eec4f5973f19c2dc3d58654165a62"
SHA2 = "22d4caca99a804ec78793281740c73741b12ce35"
REV = "d1bf7246cf12"
REV2 = "1655c5696e24"
UPLOAD = "fFZnqqhhmxMYKWD0jwAa6uw0.fFaiRjdVUZtrXEBMSuh9_gtBu3QWEDpBTYRMTx8h"
IMG_OLD = "ghcr.io/acme/web:1.4.2"
IMG_NEW = "ghcr.io/acme/web:1.5.0"


def call(i: int, cmd: str, tool: str = "bash") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps({"command": cmd})}}],
    }


def result(i: int, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": text}


def snap(*msgs: dict[str, Any], system: str = "You are an agent.") -> Snapshot:
    return from_openai_chat({"model": "gpt-4o", "messages": [{"role": "system", "content": system}, *msgs]})


def by_value(ids: list[Identifier], value: str) -> list[Identifier]:
    return [i for i in ids if i.value == value]


def regen_of(ids: list[Identifier], value: str) -> bool:
    found = by_value(ids, value)
    assert found, f"{value} not extracted; got {[i.value for i in ids]}"
    return all(i.regenerable for i in found)


# --------------------------------------------------------------------------- source rules


@pytest.mark.parametrize(
    "cmd,output,value,regenerable",
    [
        ("git log -1 --format=%H", SHA, SHA, True),
        ("alembic revision -m 'add users'", f"Generating /srv/app/migrations/versions/{REV}_add_users.py ... done\nRevision ID: {REV}", REV, False),
        ("alembic current", f"{REV} (head)", REV, True),
        ("aws s3api create-multipart-upload --bucket media --key big.bin", json.dumps({"Bucket": "media", "Key": "big.bin", "UploadId": UPLOAD}), UPLOAD, False),
        ("aws s3api list-multipart-uploads --bucket media", json.dumps({"Uploads": [{"Key": "big.bin", "UploadId": UPLOAD}]}), UPLOAD, True),
        ("stripe refunds create --charge ch_3MtwBwLkdIwHu7ix28a3tqPa", '{"id": "re_3PvDUjnz7ZsIt6EA0wmPSSZk", "object": "refund"}', "re_3PvDUjnz7ZsIt6EA0wmPSSZk", False),
        ("ls /srv/app", "/srv/app/main.py\n/srv/app/config/settings.py", "/srv/app/main.py", True),
        ("python script.py", "created tenant a989aba5-6cbc-478c-8fc5-f6e6c01f99f5", "a989aba5-6cbc-478c-8fc5-f6e6c01f99f5", False),
        ("python script.py", "wrote /srv/app/out/report.csv", "/srv/app/out/report.csv", True),
    ],
)
def test_tool_result_regenerability(cmd: str, output: str, value: str, regenerable: bool) -> None:
    ids = extract_snapshot(snap({"role": "user", "content": "go"}, call(1, cmd), result(1, output)), cache=None)
    assert regen_of(ids, value) is regenerable


def test_values_only_mentioned_in_text_are_not_required() -> None:
    """No step made or read them (PRINCIPLES §2): what the user, the system prompt or the
    agent's prose merely mention is not a required binding, whoever says it."""
    s = snap(
        {"role": "user", "content": f"roll back to {SHA} and read /srv/app/main.py"},
        {"role": "assistant", "content": f"I will edit /srv/app/main.py and keep {SHA2}."},
        system="Deploy bucket s3://acme-media/uploads is fixed.",
    )
    ids = extract_snapshot(s, cache=None)
    for v in (SHA, SHA2, "/srv/app/main.py", "s3://acme-media/uploads"):
        assert regen_of(ids, v), v
    system = [i for i in ids if i.source.origin == "system"]
    assert system and system[0].source.message_index == -1


def test_pasted_command_output_is_a_step() -> None:
    """The same output pasted as user text (aider) is judged like a tool result."""
    pasted = f"I ran this command:\n\naws s3api create-multipart-upload --bucket media --key big.bin\n\nAnd got this output:\n\n{json.dumps({'UploadId': UPLOAD})}\n"
    ids = extract_snapshot(snap({"role": "user", "content": pasted}), cache=None)
    (u,) = by_value(ids, UPLOAD)
    assert u.regenerable is False and u.why == "2a"
    read = "I ran this command:\n\ngit log -1 --format=%H\n\nAnd got this output:\n\n" + SHA + "\n"
    assert regen_of(extract_snapshot(snap({"role": "user", "content": read}), cache=None), SHA) is True


def test_tool_result_source_carries_the_call() -> None:
    ids = extract_snapshot(snap({"role": "user", "content": "x"}, call(7, "git rev-parse HEAD"), result(7, SHA)), cache=None)
    (i,) = by_value(ids, SHA)
    assert i.source.origin == "tool_result"
    assert i.source.tool_name == "bash"
    assert i.source.command == "git rev-parse HEAD"
    assert i.source.mutating is False
    assert i.source.tool_call_id == "c7"
    assert i.source.call_index == 1
    assert i.source.message_index == 2
    assert "git" in i.source.domains


# --------------------------------------------------------------------------- read-before-write


@pytest.mark.parametrize(
    "read_cmd,read_out,value,write_cmd,becomes_required",
    [
        ("git rev-parse HEAD", SHA, SHA, "git reset --hard HEAD~3", True),
        ("git rev-parse HEAD", SHA, SHA, "git commit -am wip", False),  # additive: SHA still valid
        ("kubectl get deploy web -o jsonpath='{..image}'", IMG_OLD, IMG_OLD, f"kubectl set image deployment/web web={IMG_NEW}", True),
        ("alembic current", f"{REV} (head)", REV, "alembic upgrade head", True),
        # the resource's own id is its identity, not its state: it names the same instance after the apply
        ("terraform state show aws_instance.web", 'id = "i-0a7e6875e450b9a77"', "i-0a7e6875e450b9a77", "terraform apply -auto-approve", False),
        ("terraform state show aws_instance.web", 'ami = "ami-0c55b159cbfafe1f0"', "ami-0c55b159cbfafe1f0", "terraform apply -auto-approve", True),
        ("kafka-consumer-groups --describe --group billing", "topic orders partition 3 offset 1234", "topic orders partition 3 offset 1234", "kafka-consumer-groups --group billing --topic orders --reset-offsets --to-offset 0 --execute", True),
        ("git rev-parse HEAD", SHA, SHA, "kubectl rollout restart deployment/web", False),  # other domain
        ("cat deploy/values.yaml", f"image: {IMG_OLD}", IMG_OLD, "sed -i 's/1.4.2/1.5.0/' deploy/values.yaml", True),
        ("cat deploy/values.yaml", f"image: {IMG_OLD}", IMG_OLD, "sed -i 's/x/y/' other.yaml", False),
    ],
)
def test_read_before_write(read_cmd: str, read_out: str, value: str, write_cmd: str, becomes_required: bool) -> None:
    s = snap({"role": "user", "content": "go"}, call(1, read_cmd), result(1, read_out), call(2, write_cmd), result(2, "ok"))
    ids = extract_snapshot(s, cache=None)
    assert regen_of(ids, value) is (not becomes_required)


def test_read_before_write_needs_a_later_write() -> None:
    s = snap({"role": "user", "content": "go"}, call(2, "git reset --hard HEAD~1"), result(2, "HEAD is now at d1bf724 x"), call(1, "git rev-parse HEAD"), result(1, SHA))
    assert regen_of(extract_snapshot(s, cache=None), SHA) is True


def test_paths_and_names_are_exempt_from_read_before_write() -> None:
    s = snap(
        {"role": "user", "content": "go"},
        call(1, "kubectl get deploy"),
        result(1, "deployment.apps/web 3/3 https://web.acme.io/health"),
        call(2, "kubectl rollout restart deployment/web"),
        result(2, "deployment.apps/web restarted"),
    )
    ids = extract_snapshot(s, cache=None)
    first = [i for i in ids if i.source.message_index == 2]
    assert first and all(i.regenerable for i in first), first


def test_editor_tool_write_links_by_file_name() -> None:
    s = snap(
        {"role": "user", "content": "bump the image"},
        call(1, "", tool="Read") | {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Read", "arguments": json.dumps({"file_path": "/repo/deploy/values.yaml"})}}]},
        result(1, f"image: {IMG_OLD}"),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "Edit", "arguments": json.dumps({"file_path": "/repo/deploy/values.yaml", "old_string": "1.4.2", "new_string": "1.5.0"})}}]},
        result(2, "edited"),
    )
    assert regen_of(extract_snapshot(s, cache=None), IMG_OLD) is False


# --------------------------------------------------------------------------- overrides and purity


def test_policy_overrides_by_kind_and_tool() -> None:
    s = snap({"role": "user", "content": "go"}, call(1, "git log -1 --format=%H"), result(1, SHA))
    ids = extract_snapshot(s, cache=None)
    assert regen_of(ids, SHA) is True
    assert regen_of(extract_snapshot(s, cache=None, policy=RegenPolicy(kind_overrides={"git_sha": False})), SHA) is False
    assert regen_of(extract_snapshot(s, cache=None, policy=RegenPolicy(tool_overrides={"bash": False})), SHA) is False


def test_mark_regenerability_is_pure() -> None:
    src = Source(1, "tool", "tool_result", tool_name="bash", command="alembic current", mutating=False, domains=frozenset({"db"}))
    ident = Identifier(REV, REV, "alembic_revision", "alembic-revision", False, True, src, 0, 12, REV)
    calls = [CallRecord(2, "bash", True, frozenset({"db"}), "alembic upgrade head")]
    out = mark_regenerability([ident], calls)
    assert out[0].regenerable is False
    assert ident.regenerable is True  # input untouched
    assert mark_regenerability([ident], [])[0] is ident


# --------------------------------------------------------------------------- call linking


def test_results_link_by_id_even_out_of_order() -> None:
    s = from_openai_chat(
        {
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "git rev-parse HEAD"})}},
                        {"id": "b", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "alembic upgrade head"})}},
                    ],
                },
                {"role": "tool", "tool_call_id": "b", "content": f"Running upgrade {REV2} -> {REV}, add users"},
                {"role": "tool", "tool_call_id": "a", "content": SHA},
            ]
        }
    )
    ids = extract_snapshot(s, cache=None)
    assert by_value(ids, SHA)[0].source.command == "git rev-parse HEAD"
    assert by_value(ids, REV)[0].source.command == "alembic upgrade head"
    assert regen_of(ids, REV) is False


def test_results_without_ids_link_by_name_then_position() -> None:
    calls = make_message("assistant", (Part("tool_call", json.dumps({"command": "alembic upgrade head"}), tool_name="bash"),))
    res = make_message("tool", (Part("tool_result", f"Running upgrade {REV2} -> {REV}"),))
    s = Snapshot("plain", "", (make_message("user", (Part("text", "go"),)), calls, res))
    ids = extract_snapshot(s, cache=None)
    assert by_value(ids, REV)[0].source.command == "alembic upgrade head"
    assert regen_of(ids, REV) is False


def test_anthropic_tool_use_blocks() -> None:
    s = from_anthropic(
        {
            "system": "agent",
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "tu1", "name": "Bash", "input": {"command": "aws s3api create-multipart-upload --bucket m --key k"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": json.dumps({"UploadId": UPLOAD})}]},
            ],
        }
    )
    ids = extract_snapshot(s, cache=None)
    (u,) = by_value(ids, UPLOAD)
    assert u.kind == "upload_id" and u.regenerable is False and u.source.mutating is True


def test_snapshot_calls() -> None:
    s = snap({"role": "user", "content": "x"}, call(1, "git log"), result(1, "x"), call(2, "terraform apply"), result(2, "y"))
    cs = snapshot_calls(s, cache=None)
    assert [(c.message_index, c.mutating) for c in cs] == [(1, False), (3, True)]


def test_responses_shell_calls_are_steps() -> None:
    """Codex's shell calls in a Responses body — a ``shell`` function with an argv list,
    or a ``local_shell_call`` item that has no name — are judged by their command."""
    from proxy.core.dialects import from_openai_responses

    body = {
        "instructions": "agent",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {"type": "local_shell_call", "call_id": "c1", "action": {"type": "exec", "command": ["bash", "-lc", "aws s3api create-multipart-upload --bucket m --key k"]}},
            {"type": "local_shell_call_output", "call_id": "c1", "output": json.dumps({"UploadId": UPLOAD})},
            {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", "git rev-parse HEAD"]})},
            {"type": "function_call_output", "call_id": "c2", "output": SHA},
        ],
    }
    ids = extract_snapshot(from_openai_responses(body), cache=None)
    (u,) = by_value(ids, UPLOAD)
    assert u.source.command and u.source.mutating is True and u.why == "2a"
    assert regen_of(ids, SHA) is True  # read, and nothing changed HEAD afterwards


# --------------------------------------------------------------------------- rules stated by the principles, not by tables


def test_a_creation_verb_in_an_unknown_clis_sub_command_mints() -> None:
    """PRINCIPLES §2: a tool the gate has never heard of is judged by what its call says —
    ``fork`` is a creation verb wherever it stands in the sub-command chain (one verb
    vocabulary for the call classifier and the provenance evidence)."""
    branch = "br_t7skkspff85m0l"
    s = snap({"role": "user", "content": "fork the db"}, call(1, "acmectl db fork orders --to orders-shadow"),
             result(1, f"orders-shadow ready (branch {branch}, copy-on-write from orders)"))
    assert regen_of(extract_snapshot(s, cache=None), branch) is False
    s = snap({"role": "user", "content": "show the db"}, call(1, "acmectl db show orders"),
             result(1, f"orders: 41 GiB, branch {branch}"))
    assert regen_of(extract_snapshot(s, cache=None), branch) is True


def test_every_creation_and_modification_verb_makes_a_tool_state_changing() -> None:
    for verb in sorted((CREATE_VERBS | MODIFY_VERBS) - set(READ_VERBS) - {"export"}):
        assert classify_call(f"{verb}_sandbox", "{}").mutating is True, verb
        assert classify_call(f"mcp__acme__{verb}", "{}").mutating is True, verb


def test_a_resource_named_like_a_verb_links_its_read_to_the_later_change() -> None:
    """§2b: the image read from deployment ``checkout`` before ``rollout undo`` of it is
    its rollback target — ``checkout`` names the deployment there, it is no verb."""
    image = "ghcr.io/acme/checkout@sha256:301457e15f93fd61a0736ac3a33fc51c7d8525679868094d9b2ada50029f6fac"
    for name, required in (("checkout", True), ("storefront", False)):
        s = snap({"role": "user", "content": "roll back"},
                 call(1, f"kubectl get deployment {name} -o jsonpath='{{..image}}'"), result(1, image),
                 call(2, "kubectl rollout undo deployment/checkout"), result(2, "deployment.apps/checkout rolled back"))
        assert regen_of(extract_snapshot(s, cache=None), image) is (not required), name


def test_link_keys_keep_verbs_out_of_the_sub_command_chain() -> None:
    assert "checkout" in link_keys("bash", "kubectl get deployment checkout -o yaml", "")
    assert "create" not in link_keys("bash", "gh pr create --title x", "")
    assert "grant" not in link_keys("bash", "etcdctl lease grant 60", "")


@pytest.mark.parametrize(
    "status,required",
    [("HTTP/1.1 409 Conflict", False), ("HTTP/2 500 Internal Server Error", False), ("HTTP/1.1 201 Created", True)],
)
def test_a_failed_request_mints_nothing(status: str, required: bool) -> None:
    """§2a needs a handle to what the step made: a POST answered with an error status made
    nothing, and the id its error names (the deploy that stood in its way) is not minted."""
    dep = "dep_MBChdHxH5ViINm"
    body = json.dumps({"error": "deploy_in_progress", "running_deploy": dep} if not required else {"deploy": dep})
    s = snap({"role": "user", "content": "deploy"},
             call(1, "curl -si -X POST https://deploy.internal/api/deploys -d '{\"app\": \"web\"}'"),
             result(1, f"{status}\ncontent-type: application/json\n\n{body}"))
    assert regen_of(extract_snapshot(s, cache=None), dep) is (not required)
    assert reports_failure(f"{status}\n\n{{}}") is (not required)
    assert reports_failure(f"curl said: {status}") is False  # a status line opens the output


# --------------------------------------------------------------------------- session 43 (probe5)


@pytest.mark.parametrize(
    ("body", "mutating"),
    [
        ('{"query":"{ runsOrError(limit:3){ ... on Runs { results { runId } } } }"}', False),
        ('{"query":"query Runs { runs { runId } }"}', False),
        ('{"query":"mutation { launchRun(runId:\\"x\\") { runId } }"}', True),
        ('{"name":"web"}', True),
    ],
)
def test_a_graphql_query_posted_by_curl_reads(body: str, mutating: bool) -> None:
    """The GraphQL operation decides, not the POST that carries it (PRINCIPLES §2)."""
    from proxy.core.identifiers.commands import classify_command

    cls = classify_command(f"curl -s https://acme.dagster.cloud/prod/graphql -H 'Content-Type: application/json' -d '{body}'")
    assert cls.mutating is mutating


def test_a_log_listing_that_says_started_is_no_change() -> None:
    """journalctl prints what other acts did ("Started nginx.service"): its cursor is a
    read's value (§3a), not minted by it."""
    cursor = "s=7f2efdd18120ea53d1eb5043ddf1a45c;i=f1bec0"
    s = snap({"role": "user", "content": "why does nginx restart?"},
             call(1, "journalctl -u nginx --show-cursor -n 2 --no-pager"),
             result(1, f"Mar 12 07:58:06 edge-03 systemd[1]: Started nginx.service.\n-- cursor: {cursor}"))
    ids = extract_snapshot(s, cache=None)
    assert regen_of(ids, "7f2efdd18120ea53d1eb5043ddf1a45c")


DIGEST_PROD = "sha256:7bce3c1ac822fc069bd621786740d03b5affc097a6c3928b2de887a45fd48088"
DIGEST_RC = "sha256:67ec1921826745a796c7c74c8cf39bb5422e5dc18fa82e7a9ecada62b479a004"


def test_a_copy_changes_its_destination_named_by_a_transport_url() -> None:
    """``docker://reg/repo:prod`` names the tag a later ``skopeo copy`` overwrites: the
    digest read of it is prior state (§2b); the copy's source is not changed by it."""
    s = snap({"role": "user", "content": "promote rc to prod"},
             call(1, "skopeo inspect --format '{{.Digest}}' docker://quay.io/acme/api:prod"), result(1, DIGEST_PROD),
             call(2, "skopeo inspect --format '{{.Digest}}' docker://quay.io/acme/api:rc-7"), result(2, DIGEST_RC),
             call(3, "skopeo copy docker://quay.io/acme/api:rc-7 docker://quay.io/acme/api:prod"), result(3, "Writing manifest to image destination"))
    ids = extract_snapshot(s, cache=None)
    assert not regen_of(ids, DIGEST_PROD)
    assert regen_of(ids, DIGEST_RC)


def test_a_copy_echoing_its_source_reports_no_prior_state() -> None:
    """``Copying from A to B`` names the source the agent gave: an echo of its arguments
    (§3b), not what the change moved from."""
    src = "harbor.acme.io/ledger/worker:1.42.0"
    s = snap({"role": "user", "content": "promote 1.42.0 to stable"},
             call(1, f"crane copy {src} harbor.acme.io/ledger/worker:stable"),
             result(1, f"Copying from {src} to harbor.acme.io/ledger/worker:stable\nexisting blob: {DIGEST_RC}"))
    ids = extract_snapshot(s, cache=None)
    assert all(i.regenerable for i in by_value(ids, src))


@pytest.mark.parametrize(
    ("output", "required"),
    [
        ('{"result": "Request will be processed", "took": 0.3, "requestId": "c876a8a5-ecaa-4a91-9a56-dd26bf05723f"}', True),
        ('{"result": "Created", "took": 0.3, "requestId": "c876a8a5-ecaa-4a91-9a56-dd26bf05723f"}', False),
        ("HTTP/2 202\nx-request-id: c876a8a5-ecaa-4a91-9a56-dd26bf05723f\n\n{\"status\": \"queued\"}", False),
    ],
)
def test_the_request_id_of_an_accepted_operation_is_its_handle(output: str, required: bool) -> None:
    """An async write's request id is the only handle to its outcome (§2a); a finished
    write's request id, or a header's trace id, is noise (§3d)."""
    s = snap({"role": "user", "content": "raise the alert"},
             call(1, "curl -s -X POST https://api.eu.opsgenie.com/v2/alerts -d '{\"message\": \"disk\"}'"),
             result(1, output))
    assert regen_of(extract_snapshot(s, cache=None), "c876a8a5-ecaa-4a91-9a56-dd26bf05723f") is (not required)


def test_a_created_request_entity_is_minted() -> None:
    """``tsh request create`` makes an access request: its Request ID is that entity (§2a)."""
    rid = "a0697bc6-3c1b-4c28-b5b6-df2be5832faf"
    s = snap({"role": "user", "content": "get db-admin"},
             call(1, "tsh request create --roles=db-admin --nowait"),
             result(1, f"Creating request...\nRequest ID: {rid}\nStatus:     PENDING"))
    assert not regen_of(extract_snapshot(s, cache=None), rid)


def test_an_actor_key_is_a_reference_a_change_does_not_repoint() -> None:
    """``started_by`` names who did a past act: approving the workflow does not re-point it
    (§2b needs a state the change moves)."""
    user = "6a7a5e99-c135-48d6-8a23-35522538d9fa"
    wf = "77909213-3174-45fc-b4cd-468f30acecdc"
    listing = json.dumps({"items": [{"id": wf, "name": "release", "status": "running", "started_by": user}]})
    s = snap({"role": "user", "content": "approve the hold"},
             call(1, "curl -s https://circleci.com/api/v2/pipeline/p1/workflow"), result(1, listing),
             call(2, f"curl -s -X POST https://circleci.com/api/v2/workflow/{wf}/approve/a1"), result(2, '{"message": "Accepted."}'))
    assert regen_of(extract_snapshot(s, cache=None), user)
