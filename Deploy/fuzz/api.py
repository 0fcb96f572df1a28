#!/usr/bin/env python3
"""Fuzzes every operation of a live `stratus serve` against its own OpenAPI document with
schemathesis, using real credentials, and fails on any finding.

    api.py BASE_URL ADMIN_TOKEN SECONDS REPORT_DIR

It sets up what the operations need to reach past authentication (containers, API tokens, users
and their sessions, a schema with a custom role, a server key, an asset with upload and download
URLs, a web courier token, an operator in the container's team), writes a schemathesis
configuration that hands each operation real values for its credentials and identifiers, and runs two passes: every operation but the two
that end sessions, then those two with a session of their own. Checks: not_a_server_error,
status_code_conformance, response_schema_conformance, content_type_conformance, and
`no_internal_error_item` (checks.py: no item of a batch answer fails with INTERNAL_ERROR either).
Deploy/contract/contract.sh runs it against a server of its own. Needs only the standard library besides
schemathesis and cryptography.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

BASE, ADMIN, SECONDS, REPORTS = sys.argv[1].rstrip("/"), sys.argv[2], int(sys.argv[3]), os.path.abspath(sys.argv[4])
MAIN, ADMIN_CONTAINER = "iCloud.com.example.Fuzz", "iCloud.com.example.FuzzSettings"
HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = "not_a_server_error,status_code_conformance,response_schema_conformance,content_type_conformance,no_internal_error_item"


def call(method, path, body=None, token=None, raw=None, content_type="application/json"):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(BASE + path, data=data, method=method)
    if token:
        request.add_header("Authorization", "Bearer " + token)
    if data is not None:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        raise SystemExit(f"fuzz setup: {method} {path} answered {error.code}: {error.read()[:500]!r}")


def admin(method, path, body=None):
    return call(method, "/management/1/" + path, body, token=ADMIN)[1]


def setup():
    for name in (MAIN, ADMIN_CONTAINER):
        admin("POST", "containers", {"name": name})
    schema = """DEFINE SCHEMA
        CREATE ROLE editor;
        RECORD TYPE Note (
            title STRING QUERYABLE SORTABLE SEARCHABLE,
            count INT64 QUERYABLE SORTABLE,
            tags LIST<STRING> QUERYABLE,
            place LOCATION QUERYABLE,
            attachment ASSET,
            GRANT WRITE TO "_creator",
            GRANT CREATE TO "_icloud",
            GRANT READ TO "_world",
            GRANT WRITE TO "editor"
        );
    """
    admin("POST", f"containers/{MAIN}/schema/import", {"schema": schema})
    api_token = admin("POST", f"containers/{MAIN}/tokens", {"environment": "development", "name": "fuzz"})["apiToken"]
    spare_token = admin("POST", f"containers/{MAIN}/tokens", {"environment": "development", "name": "revoked by the fuzzer"})["token"]["id"]
    q = "ckAPIToken=" + api_token

    def signup(email):
        return call("POST", f"/auth/1/{MAIN}/development/signup?{q}", {"emailAddress": email, "password": "correct horse battery"})[1]

    main, victim, ending = signup("fuzz@example.com"), signup("victim@example.com"), signup("ending@example.com")
    admin("POST", f"containers/{MAIN}/roles/editor/members", {"user": main["userRecordName"]})
    user_q = q + "&ckWebAuthToken=" + urllib.request.quote(main["ckWebAuthToken"], safe="")
    data = f"/database/1/{MAIN}/development"

    # A server key for the revoke operation.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    pem = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    key_id = admin("POST", f"containers/{MAIN}/keys", {"environment": "development", "publicKey": pem})["keyID"]

    # An operator in MAIN's team, for the operator and team operations.
    operator = "fuzz-operator@example.com"
    admin("POST", "operators", {"emailAddress": operator, "password": "correct horse battery"})
    admin("POST", f"containers/{MAIN}/team", {"operator": operator, "role": "developer"})

    # Records to find, one holding an asset (its download URL), and an upload URL for the fuzzer.
    upload = call("POST", f"{data}/private/assets/upload?{user_q}", {"tokens": [{"recordType": "Note", "fieldName": "attachment"}]})[1]
    url = upload["tokens"][0]["url"]
    receipt = call("POST", url[url.index("/assets/1/"):], raw=b"stratus fuzz asset " * 64, content_type="text/plain")[1]["singleFile"]
    operations = [{"operationType": "create", "record": {"recordType": "Note", "recordName": "with-asset",
                                                           "fields": {"title": {"value": "asset"}, "attachment": {"value": receipt}}}}]
    operations += [{"operationType": "create", "record": {"recordType": "Note", "recordName": f"note-{i}",
                                                            "fields": {"title": {"value": f"note {i}"}, "count": {"value": i},
                                                                       "tags": {"value": ["a", "b"]},
                                                                       "place": {"value": {"latitude": 52.5, "longitude": 13.4}}}}}
                   for i in range(5)]
    call("POST", f"{data}/private/records/modify?{user_q}", {"operations": operations})
    call("POST", f"{data}/public/records/modify?{user_q}", {"operations": operations[1:]})
    looked = call("POST", f"{data}/private/records/lookup?{user_q}", {"records": [{"recordName": "with-asset"}]})[1]
    download = looked["records"][0]["fields"]["attachment"]["value"]["downloadURL"]
    fresh_upload = call("POST", f"{data}/private/assets/upload?{user_q}", {"tokens": [{"recordType": "Note", "fieldName": "attachment"}]})[1]["tokens"][0]["url"]
    courier = call("POST", f"/device/1/{MAIN}/development/tokens/create?{user_q}", {})[1]["webcourierURL"]

    return {
        "api_token": api_token, "web": main["ckWebAuthToken"], "ending_web": ending["ckWebAuthToken"],
        "victim": victim["userRecordName"], "spare_token": str(spare_token), "key": key_id,
        "operator": operator, "upload": fresh_upload.rsplit("/", 1)[1], "download": download.rsplit("/", 1)[1], "courier": courier.rsplit("/", 1)[1],
    }


def config(values, web):
    def quoted(text):
        return json.dumps(text)
    return f"""
workers = 2
[parameters]
"path.container" = {quoted(MAIN)}
"path.environment" = "development"
"path.user" = {quoted(values["victim"])}
"path.role" = "editor"
"path.key" = {quoted(values["key"])}
"path.operator" = {quoted(values["operator"])}

[auth.openapi.ckAPIToken]
api_key = {quoted(values["api_token"])}

[auth.openapi.ckWebAuthToken]
api_key = {quoted(web)}

[auth.openapi.managementCredential]
bearer = {quoted(ADMIN)}

[[operations]]
include-path-regex = "/courier/"
parameters = {{ "path.token" = {quoted(values["courier"])}, "query.timeout" = 1 }}

[[operations]]
include-path-regex = "^/assets/1/upload/"
parameters = {{ "path.token" = {quoted(values["upload"])} }}

[[operations]]
include-path-regex = "^/assets/1/download/"
parameters = {{ "path.token" = {quoted(values["download"])} }}

[[operations]]
include-path-regex = "/tokens/[{{]token[}}]"
parameters = {{ "path.token" = {quoted(values["spare_token"])} }}

# Limits and schema resets would throttle or empty the container the data operations use.
[[operations]]
include-path-regex = "/containers/[{{]container[}}]/(quota|schema)"
parameters = {{ "path.container" = {quoted(ADMIN_CONTAINER)} }}
"""


def run(name, values, web, seconds, selection):
    folder = tempfile.mkdtemp(prefix="stratus-fuzz-")
    path = os.path.join(folder, "schemathesis.toml")
    with open(path, "w") as file:
        file.write(config(values, web))
    command = ["schemathesis", "--config-file", path, "run", BASE + "/openapi.json", "--phases", "examples,coverage,fuzzing",
               "--checks", CHECKS, "--max-time", str(seconds), "--report", "junit,ndjson",
               "--report-dir", os.path.join(REPORTS, name), "--output-truncate", "false"] + selection
    environment = dict(os.environ, SCHEMATHESIS_HOOKS=os.path.join(HERE, "checks.py"))
    print(f"fuzz: {name}: schemathesis for up to {seconds} s", flush=True)
    # Run in the temporary folder: schemathesis keeps its example database in the working directory.
    finished = subprocess.run(command, env=environment, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = finished.stdout
    with open(os.path.join(REPORTS, f"{name}.log"), "w") as file:
        file.write(output)
    summary = re.search(r"Test cases:\s*\n\s*(.*)", output)
    operations = re.search(r"Tested: (\d+)", output)
    print(f"fuzz: {name}: {operations.group(1) if operations else '?'} operations, {summary.group(1).strip() if summary else 'no summary'}", flush=True)
    if finished.returncode != 0:
        failures = output[output.find("=== FAILURES"):output.find("=== WARNINGS")] if "=== FAILURES" in output else output[-6000:]
        print(failures, flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return finished.returncode


def main():
    os.makedirs(REPORTS, exist_ok=True)
    values = setup()
    ending = ["--include-path-regex", "/auth/1/.*/(signout|password)$"]
    status = run("operations", values, values["web"], max(30, SECONDS - 30), ["--exclude-path-regex", ending[1]])
    status |= run("sessions", values, values["ending_web"], 30, ending)
    sys.exit(1 if status else 0)


if __name__ == "__main__":
    main()
