"""Table-driven classification of tool calls as read-only or mutating."""

from __future__ import annotations

import json

import pytest

from proxy.core.identifiers import classify_call, classify_command, command_of, is_shell_tool
from proxy.core.identifiers.evidence import creates

READ_ONLY = [
    "cockroach sql -e \"SELECT job_id, status FROM [SHOW JOBS] WHERE job_id = 972384511809765377\"",
    # RPC-style endpoints named by a read verb read, whatever method carries them
    "curl -s https://sandbox.plaid.com/accounts/balance/get -H 'Content-Type: application/json' -d @req.json",
    "curl -s -XPOST 'localhost:9200/orders/_search?size=5' -d '{\"query\": {\"match_all\": {}}}'",
    "aws logs tail /aws/lambda/rotate-8Kq2 --since 5m | tail -n 7",
    "gpg --list-keys",
    "gpg --list-secret-keys --keyid-format=long",
    "git log --oneline -5",
    "git show HEAD~1",
    "git status",
    "git rev-parse HEAD",
    "git diff main...feature",
    "git branch -a",
    "git tag",
    "git stash list",
    "kubectl get pods -n prod",
    "kubectl describe deployment web",
    "kubectl get deploy web -o jsonpath='{.spec.template.spec.containers[0].image}'",
    "kubectl rollout status deployment/web",
    "kubectl rollout history deployment/web",
    "ls -la /srv/app",
    "cat alembic.ini",
    "grep -rn upload_id src/",
    "find . -name '*.py'",
    "head -n 20 log.txt | tail -5",
    "aws ec2 describe-instances --instance-ids i-0a7e6875e450b9a77",
    "aws s3api list-multipart-uploads --bucket media",
    "aws s3api get-object-attributes --bucket b --key k",
    "aws s3 ls s3://media/",
    "aws sts get-caller-identity",
    "terraform plan -out tf.plan",
    "terraform show",
    "terraform state list",
    "terraform output -json",
    "alembic current",
    "alembic history --verbose",
    "flyway info",
    "python manage.py showmigrations blog",
    "psql -c 'SELECT * FROM alembic_version'",
    "mysql -e 'SHOW MASTER STATUS'",
    "kafka-consumer-groups --bootstrap-server k:9092 --describe --group billing",
    "kafka-consumer-groups --bootstrap-server k:9092 --group billing --topic orders --reset-offsets --to-earliest --dry-run",
    "stripe refunds list --limit 3",
    "stripe get /v1/charges/ch_1",
    "docker ps -a",
    "docker images",
    "curl -s https://api.acme.io/v1/status",
    "pytest -q tests/",
    "python -m pytest -x",
    "cd /repo && git log -1 --format=%H",
    "sudo -u app cat /etc/app.conf",
    "FOO=1 env | grep FOO",
    "git log > /dev/null 2>&1",
    "helm list -A",
    "helm history web",
    "pip list",
    "sed -n 1,20p file.py",
    "echo done",
]

MUTATING = [
    # SQL statements that start jobs or load data change state
    "cockroach sql --url \"$CRDB_URL\" -e \"IMPORT INTO orders (id) CSV DATA ('s3://x/p.csv') WITH detached\"",
    "cockroach sql -e \"BACKUP INTO 's3://acme-backups/crdb' WITH detached\"",
    "curl -s -X POST localhost:9200/_snapshot/repo/nightly/_restore",
    "curl -s -X POST https://sandbox.plaid.com/item/public_token/exchange -d @req.json",
    # a program whose commands are options: the options before its first operand speak
    "gpg --full-generate-key",
    "gpg --batch --quick-generate-key 'Lena <lena@acme.io>' ed25519 sign 2y",
    "gpg --import backup.asc",
    "git reset --hard HEAD~2",
    "git commit -am 'wip'",
    "git push origin main",
    "git rebase -i HEAD~3",
    "git checkout -b feature/x",
    "git cherry-pick d1bf724",
    "git branch -D old",
    "git stash pop",
    "alembic upgrade head",
    "alembic downgrade -1",
    "flyway migrate",
    "python manage.py migrate blog 0006",
    "python3 manage.py makemigrations",
    "terraform apply -auto-approve",
    "terraform destroy -target=aws_instance.web",
    "terraform import aws_s3_bucket.assets acme-assets",
    "terraform state rm aws_instance.web",
    "kubectl apply -f deploy.yaml",
    "kubectl set image deployment/web web=ghcr.io/acme/web:1.5.0",
    "kubectl rollout undo deployment/web",
    "kubectl rollout restart deployment/web",
    "kubectl delete pod web-7d9f8b6c5d-x2x4z",
    "kubectl scale deployment web --replicas=3",
    "kubectl patch deployment web -p '{}'",
    "aws s3api create-multipart-upload --bucket media --key big.bin",
    "aws s3api upload-part --bucket media --key big.bin --part-number 1 --upload-id abc --body p1",
    "aws s3api complete-multipart-upload --bucket media --key big.bin --upload-id abc",
    "aws s3 cp big.bin s3://media/big.bin",
    "aws ec2 terminate-instances --instance-ids i-0a7e6875e450b9a77",
    "stripe refunds create --charge ch_3MtwBwLkdIwHu7ix28a3tqPa",
    "stripe post /v1/refunds -d charge=ch_1",
    "psql -c \"UPDATE accounts SET balance = 0 WHERE id = 7\"",
    "psql -c 'INSERT INTO t VALUES (1)'",
    "psql -c 'DELETE FROM sessions'",
    "mysql -e 'DROP TABLE t'",
    "kafka-consumer-groups --bootstrap-server k:9092 --group billing --topic orders --reset-offsets --to-offset 1200 --execute",
    "kafka-topics --create --topic orders --partitions 6",
    "rm -rf build/",
    "mv a.py b.py",
    "echo 'x' > notes.txt",
    "ls && rm tmp.txt",
    "cat a | tee b.txt",
    "git log; git reset --hard origin/main",
    "bash -c 'alembic upgrade head'",
    "curl -X POST https://api.acme.io/v1/refunds -d amount=5",
    "pip install requests",
    "npm install",
    "docker run -d nginx:1.25",
    "helm upgrade web ./chart",
    "sed -i 's/a/b/' values.yaml",
    "find . -name '*.pyc' -delete",
    # tools no table knows, judged by what the command says (PRINCIPLES §2)
    "./deploy.sh",
    "tar czf - src | backup-put --tag pre-rename",
    "etcdctl lease grant 60",
    "flagctl set checkout-v2 on",
    "gh workflow run deploy.yml",
    "vendorctl jobs submit --async report.yaml",
]

UNKNOWN = ["python script.py", "make", "node index.js", "someprog --verbose"]


GENERIC_READ_ONLY = ["etcdctl get /config/app", "gh run list", "flagctl get checkout-v2", "vendorctl apply --dry-run plan.yaml"]


@pytest.mark.parametrize("cmd", GENERIC_READ_ONLY)
def test_unknown_tools_reading(cmd: str) -> None:
    assert classify_command(cmd).mutating is False, classify_command(cmd)


@pytest.mark.parametrize("cmd", READ_ONLY)
def test_read_only_commands(cmd: str) -> None:
    c = classify_command(cmd)
    assert c.mutating is False, c


@pytest.mark.parametrize("cmd", MUTATING)
def test_mutating_commands(cmd: str) -> None:
    c = classify_command(cmd)
    assert c.mutating is True, c


@pytest.mark.parametrize("cmd", UNKNOWN)
def test_unknown_commands(cmd: str) -> None:
    assert classify_command(cmd).mutating is None


@pytest.mark.parametrize(
    "cmd,domains",
    [
        ("git rev-parse HEAD", {"git"}),
        ("git reset --hard HEAD~1", {"git"}),
        ("git commit -m x", {"git:additive"}),
        ("kubectl get deploy web -o yaml", {"k8s"}),
        ("terraform apply", {"terraform"}),
        ("alembic upgrade head", {"db"}),
        ("aws s3api create-multipart-upload --bucket b --key k", {"aws:s3"}),
        ("aws s3 ls s3://b", {"aws:s3"}),
        ("cat ./deploy/values.yaml", {"file:values.yaml"}),
        ("stripe refunds create --charge ch_1", {"stripe"}),
        ("kafka-consumer-groups --describe --group g", {"kafka"}),
    ],
)
def test_domains(cmd: str, domains: set[str]) -> None:
    assert domains <= classify_command(cmd).domains


@pytest.mark.parametrize(
    "tool,args,mutating",
    [
        ("get_deployment", {"name": "web"}, False),
        ("list_uploads", {}, False),
        ("read_file", {"path": "a.py"}, False),
        ("search_code", {"q": "x"}, False),
        ("view", {"path": "a.py"}, False),
        ("Read", {"file_path": "/a.py"}, False),
        ("Grep", {"pattern": "x"}, False),
        ("Glob", {"pattern": "*.py"}, False),
        ("WebFetch", {"url": "https://x.io"}, False),
        ("create_refund", {"charge": "ch_1"}, True),
        ("update_deployment", {"image": "x:1"}, True),
        ("delete_bucket", {"name": "b"}, True),
        ("apply_migration", {}, True),
        ("write_file", {"path": "a.py", "content": "x"}, True),
        ("edit_file", {"path": "a.py"}, True),
        ("Write", {"file_path": "/a.py", "content": ""}, True),
        ("Edit", {"file_path": "/a.py"}, True),
        ("apply_patch", {"input": "*** Begin Patch"}, True),
        ("run_migration", {}, True),
        ("execute_query", {"sql": "SELECT 1"}, False),
        ("execute_query", {"sql": "UPDATE t SET a = 1"}, True),
        ("run_sql", {"query": "DELETE FROM t"}, True),
        ("http_request", {"method": "GET", "url": "https://x"}, False),
        ("http_request", {"method": "POST", "url": "https://x"}, True),
        ("str_replace_editor", {"command": "view", "path": "/a.py"}, False),
        ("str_replace_editor", {"command": "str_replace", "path": "/a.py"}, True),
        ("mcp__stripe__create_refund", {}, True),
        ("mcp__github__get_pull_request", {}, False),
        ("refund_create", {}, True),
        ("kubectl", {"command": "get pods"}, False),
        ("kubectl", {"command": "rollout undo deployment/web"}, True),
        ("mcp__forge__spin_up_preview", {"branch": "feat/x"}, True),  # a phrasal verb: not "preview"
        ("tear_down_environment", {"env": "pr-12"}, True),
        ("look_up_order", {"id": "o_1"}, False),
        ("frobnicate", {}, None),
    ],
)
def test_non_shell_tools(tool: str, args: dict[str, object], mutating: bool | None) -> None:
    assert classify_call(tool, json.dumps(args)).mutating is mutating


@pytest.mark.parametrize(
    "tool,args,command",
    [
        ("bash", {"command": "git log -1"}, "git log -1"),
        ("Bash", {"command": "ls", "description": "list"}, "ls"),
        ("shell", {"command": ["bash", "-lc", "git status"]}, "git status"),
        ("local_shell", {"type": "exec", "action": {"command": ["ls", "-la"]}}, "ls -la"),
        ("execute_command", {"command": "kubectl get pods"}, "kubectl get pods"),
        ("run_terminal_cmd", {"command": "pytest"}, "pytest"),
        ("developer__shell", {"command": "git diff"}, "git diff"),
        ("exec_command", {"cmd": "echo hi"}, "echo hi"),
    ],
)
def test_shell_tools_expose_their_command(tool: str, args: dict[str, object], command: str) -> None:
    assert is_shell_tool(tool)
    assert command_of(tool, json.dumps(args)) == command
    assert classify_call(tool, json.dumps(args)).command == command


def test_non_shell_tool_has_no_command() -> None:
    assert not is_shell_tool("read_file")
    assert command_of("read_file", '{"command": "rm -rf /"}') is None


def test_raw_argument_text_and_garbage_never_raise() -> None:
    assert classify_call("bash", "git log").mutating is False
    for junk in ["", "{", "[1,2", "\"unterminated", "'", "a && && b", "$(rm -rf /)", "\x00\x01"]:
        classify_call("bash", junk)
        classify_command(junk)
        classify_call("weird_tool", junk)


def test_a_phrasal_creation_verb_makes_what_its_tool_returns() -> None:
    assert creates("mcp__forge__spin_up_preview", None, "Preview is live")
    assert not creates("mcp__forge__tear_down_preview", None, "Preview removed")
    assert not creates("look_up_order", None, "order o_1: paid")


@pytest.mark.parametrize(
    "code,methods_act,verb",
    [
        ("db.orders.updateOne({_id: 1}, {$set: {s: 'x'}})", False, "update"),
        ("db.orders.find({}).count()", True, "read"),
        ("print(db.orders.countDocuments({}))", True, "read"),
        # a bare method: in a program's own shell it acts on that program's data …
        ("db.orders.drop()", True, "drop"),
        ("db.sessions.remove({})", True, "remove"),
        # … in general code it is a builtin as often as a change
        ("db.orders.drop()", False, None),
        ("cfg.update(extra); print(cfg)", False, None),
        # a bare function is never the program's API
        ("seen = set(); print(len(seen))", True, None),
        # a program's own verbs count in code too
        ("sh.enableSharding('shop'); sh.status()", True, "enable"),
        ("client.restore_snapshot(name='nightly')", False, "restore"),
        ("x = 1 + 2", True, None),
    ],
)
def test_code_is_judged_by_the_verbs_of_its_calls(code: str, methods_act: bool, verb: str | None) -> None:
    """One reading of code for a code-running tool and for a program's ``--eval`` (PRINCIPLES §2)."""
    from proxy.core.identifiers.callkinds import code_verb

    assert code_verb(code, bare_methods_act=methods_act) == verb


@pytest.mark.parametrize(
    "command,mutating",
    [
        ("mongosh shop --quiet --eval 'db.orders.drop()'", True),
        ("mongosh shop --quiet --eval 'db.orders.findOne({_id: 7})'", False),
        ("mongosh shop --quiet --eval 'db.orders.deleteMany({state: \"stale\"})'", True),
        ("python3 -c 'import os; os.remove(\"/tmp/lock\")'", True),
    ],
)
def test_a_programs_shell_runs_code_that_acts_by_its_methods(command: str, mutating: bool) -> None:
    """``mongosh --eval 'db.orders.drop()'`` drops a collection: a bare method of the API the
    program's shell runs is a change, though the same call in a ``python_exec`` tool's code
    leaves the decision to the tool's name."""
    assert classify_command(command).mutating is mutating
    assert classify_call("python_exec", json.dumps({"code": "db.orders.drop()"})).mutating is classify_call("python_exec", "{}").mutating


def test_an_http_tool_posting_to_a_read_endpoint_reads() -> None:
    """``POST /v1/records:batchGet`` and ``POST /accounts/balance/get`` are queries an RPC-style
    API carries in a POST (PRINCIPLES §2: what ran decides); ``POST /v1/orders`` creates."""
    assert classify_call("http", json.dumps({"method": "POST", "path": "/v1/records:batchGet"})).mutating is False
    assert classify_call("plaid_request", json.dumps({"method": "POST", "url": "https://sandbox.plaid.com/accounts/balance/get"})).mutating is False
    assert classify_call("http", json.dumps({"method": "POST", "path": "/v1/orders"})).mutating is True


def test_a_tool_named_only_for_running_runs_its_command_line() -> None:
    """A tool called ``run`` (or ``exec_tool``) says nothing of what it does but that it
    runs its ``command``: the command line decides (PRINCIPLES §2), a listing reads."""
    listing = json.dumps({"command": "gcloud compute snapshots list --project=acme-ci --limit=3"})
    assert classify_call("run", listing).mutating is False
    assert classify_call("exec_tool", json.dumps({"command": "gcloud compute disks create d1 --zone=us-central1-a"})).mutating is True
    assert classify_call("run", json.dumps({"workflow": "nightly"})).mutating is True  # no command line: its verb


def test_algorithm_names_are_no_ticket_keys() -> None:
    from proxy.core.dialects import from_openai_chat
    from proxy.core.identifiers import extract_snapshot

    text = "Warning: Permanently added 'compute.6028411937765120934' (ED25519) to the list of known hosts; key type CV25519."
    found = extract_snapshot(from_openai_chat({"messages": [{"role": "user", "content": text}]}), cache=None)
    assert not [i.value for i in found if i.kind == "ticket_id"]


@pytest.mark.parametrize(
    "command,mutating",
    [
        # option words speak only when nothing else does, a write verb over a read one
        ("leasectl --log-json acquire build-lock", True),
        ("migratectl --log-level=debug --execute", True),
        ("opsctl --show-diff --auto-approve", True),
        ("vendorcli --no-check-certificate --upload-file report.csv", True),
        # a body that writes is no read, whatever endpoint carries it
        ("curl -s -X POST http://influx:8086/query --data-urlencode 'q=DROP DATABASE metrics'", True),
        # checkout -B resets a branch: not additive
        ("git checkout -B main origin/main", True),
    ],
)
def test_review_cases_of_session_41(command: str, mutating: bool) -> None:
    assert classify_command(command).mutating is mutating


def test_checkout_dash_b_is_no_additive_change() -> None:
    assert "git:additive" not in classify_command("git checkout -B main origin/main").domains
    assert "git:additive" in classify_command("git checkout feature/cache").domains
