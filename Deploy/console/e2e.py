#!/usr/bin/env python3
"""Drives the console in Debian's Chromium with Playwright, as a person would, and fails on the
first thing that does not work.

    e2e.py SERVER_URL ADMIN_TOKEN OUTPUT_DIR

A superuser operator is added with the admin token (as `stratus operator add` does); everything
after is done in the browser: sign in (keyboard), create a container, add a record type and
fields in development, create, find (query builder) and edit a record, review the deploy plan,
edit one field of a record holding every field type with hostile values (every other field comes
back byte-identical), clear a field, keep the form after a typing mistake, see a concurrent change
as a conflict with both values, dry-run, deploy and watch the index build finish (twice: the second over a production record),
disable a user, find each action in the audit log, find an app's requests in Telemetry (charts)
and Logs (filtered to the failed one, by its request id), sign out. A record holding markup is shown on
the way and no script of it may run (any dialog fails the run). Screenshots of every page go to
OUTPUT_DIR, and one page is also taken at a phone's width; every page's controls must have labels,
and axe-core (axe-playwright-python) may find no serious or critical accessibility problem on any.
"""
import base64
import hashlib
import json
import os
import re
import sys
import urllib.error
import urllib.request

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect, sync_playwright

BASE, ADMIN, OUT = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
EMAIL, PASSWORD = "ada@example.com", "console password 1"
CONTAINER = "iCloud.com.example.Console"
os.makedirs(OUT, exist_ok=True)
shots = []
axe = Axe()
inaccessible = []


def api(method, path, body=None, query=""):
    request = urllib.request.Request(BASE + path + query, data=json.dumps(body).encode() if body is not None else None, method=method)
    request.add_header("Content-Type", "application/json")
    if path.startswith("/management/"):
        request.add_header("Authorization", "Bearer " + ADMIN)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def upload_asset(where, record_type, field, data):
    """An asset's receipt, as an app gets one: an upload URL (the management API's assets/upload), then the bytes."""
    tokens = api("POST", f"/management/1/containers/{CONTAINER}/assets/upload",
                 dict(where, tokens=[{"recordType": record_type, "fieldName": field}]))["tokens"]
    request = urllib.request.Request(tokens[0]["url"], data=data, method="POST")
    request.add_header("Content-Type", "application/octet-stream")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["singleFile"]


def checksum(data):
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def kept(record, name):
    """A field's value as compared across saves (an asset's download URL is signed anew each time)."""
    field = record["fields"].get(name)
    if field and field.get("type") == "ASSETID":
        return {key: field["value"].get(key) for key in ("fileChecksum", "size")}
    return field


UNLABELLED = """[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter(e => (e.tagName === 'BUTTON' ? !e.textContent.trim() : e.labels.length === 0) && !e.getAttribute('aria-label'))
  .map(e => e.outerHTML.slice(0, 120))"""


NARROW_COLUMNS = """[...document.querySelectorAll('table th')].filter(th => {
  const word = (th.textContent.trim().split(/\\s+/)[0] || '');
  const probe = document.createElement('span');
  probe.style.whiteSpace = 'nowrap';
  probe.textContent = word;
  th.appendChild(probe);
  const wide = probe.getBoundingClientRect().width;
  probe.remove();
  const style = getComputedStyle(th);
  return th.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) + 0.5 < wide;
}).map(th => th.textContent.trim())"""


WIDE_ELEMENTS = """[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
  && ![...e.children].some(c => c.getBoundingClientRect().right > window.innerWidth + 1)
  && (!(e.parentElement && e.parentElement.closest('.scroll, pre')) || getComputedStyle(e).position === 'absolute'))
  .slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className ? '.' + e.className : '') + ' ' + (e.textContent || '').trim().slice(0, 40))"""


def data(operation, body, request_id, token):
    """A data-API request as an app sends it, with its X-Request-ID; the HTTP status."""
    request = urllib.request.Request(f"{BASE}/database/1/{CONTAINER}/development/public/{operation}?ckAPIToken={token}",
                                     data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("X-Request-ID", request_id)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def shot(page, name):
    """A screenshot of the page, after checking that each of its controls has a label."""
    unlabelled = page.evaluate(UNLABELLED)
    if unlabelled:
        raise SystemExit(f"console e2e: controls without a label on the {name} page: {unlabelled}")
    # axe-core's serious and critical findings, collected for the end of the run.
    for violation in axe.run(page).response["violations"]:
        if violation["impact"] in ("serious", "critical"):
            targets = [node["target"] for node in violation["nodes"][:3]]
            inaccessible.append(f"{name}: {violation['id']} ({violation['impact']}, {len(violation['nodes'])} elements, e.g. {targets})")
    path = os.path.join(OUT, f"{len(shots) + 1:02d}-{name}.png")
    page.screenshot(path=path, full_page=True)
    shots.append(path)


def step(text):
    print(f"console e2e: {text}", flush=True)


def main():
    api("POST", "/management/1/operators", {"emailAddress": EMAIL, "password": PASSWORD, "superuser": True})
    dialogs = []
    with sync_playwright() as playwright:
        arguments = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=arguments)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        errors = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)

        step("sign in with the keyboard")
        page.goto(BASE + "/console")
        expect(page).to_have_url(re.compile(r"/console/signin$"))
        expect(page.locator("#email")).to_have_attribute("autocomplete", "username")
        expect(page.locator("#password")).to_have_attribute("autocomplete", "current-password")
        shot(page, "sign-in")
        page.locator("#email").focus()
        page.keyboard.type(EMAIL)
        page.keyboard.press("Tab")
        page.keyboard.type(PASSWORD)
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        expect(page.locator("header .who")).to_contain_text(EMAIL)
        shot(page, "containers-empty")

        step("create a container")
        page.get_by_label("Container identifier").fill(CONTAINER)
        page.get_by_role("button", name="Create").click()
        expect(page.locator("h1")).to_have_text(CONTAINER)
        shot(page, "container")

        step("add a record type and fields in development")
        page.get_by_role("link", name="Schema", exact=True).first.click()
        page.locator("#new-type").fill("Note")
        page.get_by_role("button", name="Add the type").click()
        expect(page.locator(".notice")).to_contain_text("added record type Note")
        for field, kind, flags in [("title", "STRING", ["QUERYABLE", "SORTABLE"]), ("count", "INT64", ["QUERYABLE", "SORTABLE"])]:
            form = page.locator("form", has=page.get_by_role("button", name="Add the field"))
            form.get_by_label("Record type").select_option("Note")
            form.get_by_label("Field name").fill(field)
            form.get_by_label("Field type").select_option(kind)
            for flag in flags:
                form.get_by_label(flag).check()
            form.get_by_role("button", name="Add the field").click()
            expect(page.locator(".notice")).to_contain_text(f"added field Note.{field}")
        grant = page.locator("form", has=page.get_by_role("button", name="Grant"))
        grant.get_by_label("Permission").select_option("READ")
        grant.get_by_label("To role").select_option("_world")
        grant.get_by_label("On record type").select_option("Note")
        grant.get_by_role("button", name="Grant").click()
        expect(page.locator(".notice")).to_contain_text("granted READ on Note to _world")
        expect(page.locator("table", has_text="Fields of Note")).to_contain_text("QUERYABLE SORTABLE")
        shot(page, "schema")

        step("create, find and edit a record")
        page.get_by_role("link", name="Browse Note records").click()
        page.get_by_role("link", name="New Note record").click()
        page.get_by_label("Record name").fill("first-note")
        page.get_by_label("title (STRING)").fill("Hello from the console")
        page.get_by_label("count (INT64)").fill("7")
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved first-note")
        shot(page, "record")
        page.get_by_role("link", name="Records", exact=True).click()
        page.get_by_role("link", name="Note").first.click()
        page.get_by_role("link", name="New Note record").click()
        page.get_by_label("Record name").fill("markup")
        page.get_by_label("title (STRING)").fill('<img src=x onerror=alert("ran")><script>alert("ran")</script>')
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved markup")
        page.get_by_role("link", name="Records", exact=True).click()
        page.get_by_role("link", name="Note").first.click()
        # The comparators follow the field chosen: a number has no BEGINS_WITH, a string has.
        page.get_by_label("Filter 1 field").select_option("count")
        expect(page.locator("#o1 option", has_text="LESS_THAN").first).to_be_attached()
        expect(page.locator("#o1 option", has_text="BEGINS_WITH")).to_have_count(0)
        expect(page.locator("#v1")).to_have_attribute("inputmode", "decimal")
        page.get_by_label("Filter 1 field").select_option("title")
        expect(page.locator("#o1 option", has_text="BEGINS_WITH").first).to_be_attached()
        expect(page.locator("#v1")).to_have_attribute("inputmode", "text")
        page.get_by_label("comparator").first.select_option("EQUALS")
        page.get_by_label("value").first.fill("Hello from the console")
        page.get_by_role("button", name="Run the query").click()
        results = page.locator("table", has_text="Note records")
        expect(results).to_contain_text("first-note")
        expect(results).not_to_contain_text("markup")
        shot(page, "query")
        # A SORTABLE field's header sorts by it.
        results.get_by_role("link", name="Sort by count, ascending").click()
        expect(page.locator("#sort")).to_have_value("count")
        results = page.locator("table", has_text="Note records")
        results.get_by_role("link", name="first-note").click()
        page.get_by_label("title (STRING)").fill("Hello, edited")
        page.get_by_role("button", name="Save").click()
        expect(page.locator("table", has_text="Fields")).to_contain_text("Hello, edited")

        step("edit one field of a record holding every type, with hostile values: nothing else changes")
        hostile = {
            "s": {"value": "Smith, John\n  two spaces\tand a tab, then RTL \u202eevil\u202c and caf\u00e9 \U0001F389  "},
            "big": {"value": ", ".join(["x" * 30] * 330)},
            "n": {"value": 42}, "d": {"value": 3.25}, "t": {"value": 1764151200123, "type": "TIMESTAMP"},
            "l": {"value": {"latitude": 52.52, "longitude": 13.405, "altitude": 34.5, "horizontalAccuracy": 5.0}},
            "r": {"value": {"recordName": "first-note", "action": "NONE"}},
            "b": {"value": "aGVsbG8sIHdvcmxk"},
            "ls": {"value": ["Smith, John", " spaced ", "two\nlines"]}, "le": {"value": [], "type": "STRING_LIST"},
            "ln": {"value": [3, 1, 2]},
        }
        where = {"environment": "development", "database": "public"}
        # An asset too, uploaded as an app does: an upload URL, the bytes, the receipt saved with the record.
        first_file = b"first asset bytes\x00\xff"
        hostile["a"] = {"value": upload_asset(where, "Everything", "a", first_file)}
        api("POST", f"/management/1/containers/{CONTAINER}/records/modify",
            dict(where, operations=[{"operationType": "create", "record": {"recordName": "hostile", "recordType": "Everything", "fields": hostile}}]))

        def stored():
            found = api("POST", f"/management/1/containers/{CONTAINER}/records/lookup", dict(where, records=[{"recordName": "hostile"}]))
            return found["records"][0]

        before = stored()
        if len(before["fields"]["big"]["value"]) < 10000:
            raise SystemExit("console e2e: the 10 KB value was not stored")
        view = BASE + f"/console/c/{CONTAINER}/records/view?environment=development&database=public&zone=_defaultZone&name=hostile"
        page.goto(view)
        page.get_by_label("n (INT64)").fill("43")
        shot(page, "record-editor")
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved hostile")
        after = stored()
        if after["fields"]["n"]["value"] != 43:
            raise SystemExit(f"console e2e: the edited field was not saved: {after['fields']['n']}")
        for name in hostile:
            if name != "n" and kept(after, name) != kept(before, name):
                raise SystemExit(f"console e2e: saving one field changed {name}: {before['fields'].get(name)!r} became {after['fields'].get(name)!r}")
        if after["fields"]["a"]["value"]["fileChecksum"] != checksum(first_file):
            raise SystemExit(f"console e2e: the asset is not the one uploaded: {after['fields']['a']}")
        step("replace an asset by choosing a file in the editor")
        page.goto(view)
        second_file = b"a second file, chosen in the console \xe2\x9c\x93"
        page.get_by_label("a (ASSET)", exact=True).set_input_files(files=[{"name": "second.txt", "mimeType": "text/plain", "buffer": second_file}])
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved hostile")
        replaced = stored()
        if replaced["fields"]["a"]["value"]["fileChecksum"] != checksum(second_file) or replaced["fields"]["a"]["value"]["size"] != len(second_file):
            raise SystemExit(f"console e2e: the asset chosen in the editor was not saved: {replaced['fields']['a']}")
        for name in hostile:
            if name not in ("n", "a") and kept(replaced, name) != kept(before, name):
                raise SystemExit(f"console e2e: replacing the asset changed {name}")
        download = replaced["fields"]["a"]["value"]["downloadURL"]
        with urllib.request.urlopen(download, timeout=30) as response:
            if response.read() != second_file:
                raise SystemExit("console e2e: the asset downloaded is not the file chosen")
        page.goto(view)
        page.get_by_label("Remove this asset").check()
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved hostile")
        if "a" in stored()["fields"]:
            raise SystemExit("console e2e: removing the asset left it on the record")
        step("clear a field")
        page.goto(view)
        page.get_by_label("d (DOUBLE)").fill("")
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved hostile")
        cleared = stored()
        if "d" in cleared["fields"] or cleared["fields"].get("s") != before["fields"]["s"]:
            raise SystemExit(f"console e2e: clearing d did not remove it alone: {sorted(cleared['fields'])}")
        step("a typing mistake keeps the form; a concurrent change is a conflict shown with both values")
        page.goto(view)
        page.get_by_label("n (INT64)").fill("forty-four")
        page.get_by_label("s (STRING)").fill("typed by the person")
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".field-error")).to_contain_text("is not a whole number")
        expect(page.get_by_label("s (STRING)")).to_have_value("typed by the person")
        page.get_by_label("n (INT64)").fill("44")
        api("POST", f"/management/1/containers/{CONTAINER}/records/modify",
            dict(where, operations=[{"operationType": "forceUpdate", "record": {"recordName": "hostile", "recordType": "Everything", "fields": {"n": {"value": 99}}}}]))
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".error").first).to_contain_text("changed hostile after you opened it")
        conflict = page.locator("table", has_text="Saved meanwhile")
        changed_n = conflict.locator("tbody tr").first
        expect(changed_n).to_contain_text("44")
        expect(changed_n).to_contain_text("99")
        shot(page, "record-conflict")
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved hostile")
        if stored()["fields"]["n"]["value"] != 44:
            raise SystemExit("console e2e: saving again after a conflict did not keep the person's value")

        step("tables keep their columns with 200-character names and 10 KB values")
        long_name = "r" * 190
        for batch in range(3):
            api("POST", f"/management/1/containers/{CONTAINER}/records/modify", dict(where, operations=[
                {"operationType": "create", "record": {"recordName": f"{long_name}{number:010d}", "recordType": "Everything",
                                                       "fields": {"s": {"value": ("long value " * 1000)[:10240]}, "big": {"value": "y" * 10240},
                                                                  "n": {"value": number}, "ls": {"value": ["one", "two", "three"] * 20}}}}
                for number in range(batch * 20, batch * 20 + 20)]))
        page.goto(BASE + f"/console/c/{CONTAINER}/records?environment=development&type=Everything&limit=50")
        table = page.locator("table", has_text="Everything records")
        expect(table).to_be_visible()
        height = page.evaluate("document.documentElement.scrollHeight")
        if height > 3000:
            raise SystemExit(f"console e2e: the 50-record page is {height} px tall")
        narrow = page.evaluate(NARROW_COLUMNS)
        if narrow:
            raise SystemExit(f"console e2e: columns narrower than their header's first word: {narrow}")
        shot(page, "records-long-values")

        step("review the deploy plan, dry-run, deploy, watch the index build")
        page.get_by_role("link", name="Deploy", exact=True).click()
        expect(page.locator("#plan")).to_contain_text("Note")
        shot(page, "deploy-plan")
        page.get_by_role("button", name="Dry run").click()
        expect(page.locator(".notice")).to_contain_text("Dry run: nothing was changed")
        page.get_by_label("To deploy, type").fill(CONTAINER)
        page.get_by_role("button", name="Deploy to production").click()
        expect(page.locator("#builds-done")).to_be_visible(timeout=30000)
        shot(page, "index-builds-first")
        # A production record, then a new index over it: the build has work to show.
        page.goto(BASE + f"/console/c/{CONTAINER}/records/new?environment=production&type=Note")
        page.get_by_label("title (STRING)").fill("in production")
        page.get_by_label("count (INT64)").fill("1")
        page.get_by_label("This changes production").fill(CONTAINER)
        page.get_by_role("button", name="Save").click()
        expect(page.locator(".notice")).to_contain_text("saved")
        page.get_by_role("link", name="Schema", exact=True).click()
        page.get_by_role("link", name="Change the indexes of Note.title").click()
        # The form starts from the field's indexes as they are.
        expect(page.get_by_label("QUERYABLE")).to_be_checked()
        expect(page.get_by_label("SEARCHABLE")).not_to_be_checked()
        page.get_by_label("SEARCHABLE").check()
        shot(page, "field-indexes")
        page.get_by_role("button", name="Set the indexes").click()
        expect(page.locator(".notice")).to_contain_text("set the indexes of Note.title")
        page.get_by_role("link", name="Deploy", exact=True).click()
        expect(page.locator("table", has_text="Index builds after the deploy")).to_contain_text("Note.title")
        page.get_by_label("To deploy, type").fill(CONTAINER)
        page.get_by_role("button", name="Deploy to production").click()
        expect(page.locator("#builds-done")).to_be_visible(timeout=30000)
        expect(page.locator("#index-builds")).to_contain_text("Note.title")
        shot(page, "index-builds")
        # With nothing left to do, nothing is offered: no deploy form, no build step.
        page.reload()
        expect(page.get_by_role("button", name="Build one step")).to_have_count(0)
        page.get_by_role("link", name="Deploy", exact=True).click()
        expect(page.locator("main")).to_contain_text("there is nothing to deploy")
        expect(page.get_by_role("button", name="Deploy to production")).to_have_count(0)

        step("disable a user")
        token = api("POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "development", "name": "e2e"})["apiToken"]
        api("POST", f"/auth/1/{CONTAINER}/development/signup", {"emailAddress": "lee@example.com", "password": "lee's password"}, f"?ckAPIToken={token}")
        page.get_by_role("link", name="Users", exact=True).click()
        row = page.locator("tr", has_text="lee@example.com")
        row.get_by_role("button", name="Disable").click()
        # Asked first: the page says what disabling does, and nothing happens until it is confirmed.
        expect(page.locator("h1")).to_contain_text("Disable")
        expect(page.locator(".consequence")).to_contain_text("can no longer sign in")
        shot(page, "confirm-disable")
        page.get_by_role("button", name="Disable the user").click()
        expect(page.locator(".notice")).to_contain_text("is disabled")
        expect(page.locator("tr", has_text="lee@example.com")).to_contain_text("disabled")
        shot(page, "users")

        step("find each action in the audit log")
        page.get_by_role("link", name="Audit log", exact=True).click()
        log = page.locator("table", has_text="Audit log")
        for action in ["container.create", "schema.import", "records.modify", "schema.deploy", "user.disable"]:
            expect(log).to_contain_text(action)
        expect(log).to_contain_text(f"operator {EMAIL}")
        page.get_by_label("Action").select_option("user.disable")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("table", has_text="Audit log").locator("tbody tr")).to_have_count(1)
        shot(page, "audit")

        step("an app's requests in Telemetry and Logs")
        token = api("POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "development", "name": "e2e app"})["apiToken"]
        for number in range(3):
            if data("records/lookup", {"records": [{"recordName": f"missing-{number}"}]}, f"e2e-lookup-{number}", token) != 200:
                raise SystemExit("console e2e: a lookup through the data API failed")
        if data("records/lookup", {"records": "not a list"}, "e2e-bad-lookup", token) != 400:
            raise SystemExit("console e2e: a bad lookup was not answered 400")
        page.get_by_role("link", name="Telemetry", exact=True).click()
        by_operation = page.locator("table", has_text="By operation")
        lookups = by_operation.locator("tr", has_text="records/lookup").locator("td")
        expect(lookups.nth(1)).to_have_text("4")
        expect(lookups.nth(2)).to_have_text("1")
        expect(page.locator("svg.chart")).to_have_count(2)
        expect(page.locator("svg.chart rect.chart-requests").first).to_be_visible()
        expect(page.locator("svg.chart rect.chart-errors").first).to_be_attached()
        expect(page.locator("svg.chart circle.chart-p95").first).to_be_attached()
        shot(page, "telemetry")
        page.get_by_role("link", name="Logs", exact=True).click()
        requests = page.locator("table", has_text="Requests, newest first")
        for request_id in ["e2e-lookup-0", "e2e-lookup-2", "e2e-bad-lookup"]:
            expect(requests).to_contain_text(request_id)
        page.get_by_label("Status").select_option("4xx")
        page.get_by_role("button", name="Filter").click()
        rows = page.locator("table", has_text="Requests, newest first").locator("tbody tr")
        expect(rows).to_have_count(1)
        expect(rows).to_contain_text("BAD_REQUEST")
        expect(rows).to_contain_text("e2e-bad-lookup")
        expect(rows.locator("td").nth(4)).to_contain_text("records")
        page.get_by_label("Status").select_option("")
        page.get_by_label("Request ID").fill("e2e-lookup-1")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("table", has_text="Requests, newest first").locator("tbody tr")).to_have_count(1)
        page.get_by_label("Request ID").fill("")
        page.get_by_label("Text").fill("e2e-lookup")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("table", has_text="Requests, newest first").locator("tbody tr")).to_have_count(3)
        shot(page, "logs")

        step("push: an APNs credential set and removed, the key never shown")
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        p8 = ec.generate_private_key(ec.SECP256R1()).private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                                   serialization.NoEncryption()).decode()
        page.get_by_role("link", name="Push", exact=True).click()
        expect(page.locator("table", has_text="Pushes by environment")).to_contain_text("not set")
        page.get_by_label("Key: the text of AuthKey_XXXXXXXXXX.p8").fill(p8)
        page.get_by_label("Key id (10 characters)").fill("ABC123DEFG")
        page.get_by_label("Team id (10 characters)").fill("TEAM123456")
        page.get_by_label("Topic: the app's bundle id").fill("com.example.e2e")
        page.get_by_role("button", name="Set", exact=True).click()
        expect(page.locator("p.notice")).to_contain_text("APNs set for development: topic com.example.e2e")
        expect(page.locator("table", has_text="Pushes by environment")).to_contain_text("ABC123DEFG")
        if "PRIVATE KEY" in page.content() or p8.splitlines()[1] in page.content():
            raise SystemExit("console e2e: the push page shows the APNs key")
        shot(page, "push")
        page.locator("tr", has_text="com.example.e2e").get_by_role("button", name="Remove").click()
        expect(page.locator("p.consequence")).to_contain_text("get no pushes")
        page.get_by_role("button", name="Remove the credential").click()
        expect(page.locator("p.notice")).to_contain_text("APNs removed for development")
        step("every other page")
        for section in ["Tokens & keys", "Subscriptions", "Shares", "Usage & quotas", "Team", "Overview"]:
            page.get_by_role("link", name=section, exact=True).click()
            expect(page.locator("h1")).to_be_visible()
            shot(page, section.lower().replace(" & ", "-").replace(" ", "-"))
        step("a superuser's pages: operators and the server")
        page.get_by_role("link", name="Operators", exact=True).click()
        page.get_by_label("Email address").fill("e2e-operator@example.com")
        page.get_by_label("Password (at least 12 characters; tell them to change it)").fill("an operator password for e2e")
        page.get_by_role("button", name="Add the operator").click()
        expect(page.locator("p.notice")).to_contain_text("added operator e2e-operator@example.com")
        row = page.locator("tr", has_text="e2e-operator@example.com")
        row.get_by_role("button", name="Disable").click()
        expect(page.locator("p.consequence")).to_contain_text("can no longer sign in")
        shot(page, "operator-disable-confirm")
        page.get_by_role("button", name="Disable the operator").click()
        expect(page.locator("tr", has_text="e2e-operator@example.com")).to_contain_text("disabled")
        shot(page, "operators")
        page.get_by_role("link", name="Server", exact=True).click()
        expect(page.locator("table", has_text="This server process")).to_contain_text("Memory (resident)")
        expect(page.locator("table", has_text="Server audit log")).to_contain_text("operator.disable")
        shot(page, "server")
        page.goto(BASE + f"/console/c/{CONTAINER}")

        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(BASE + f"/console/c/{CONTAINER}/records?type=Note")
        # The menu and the forms fold; the first record is on the first screen.
        expect(page.locator("details.menu")).not_to_have_attribute("open", "")
        first = page.locator("table", has_text="Note records").locator("tbody tr").first
        top = first.evaluate("row => row.getBoundingClientRect().top")
        if top + 30 > 844:
            raise SystemExit(f"console e2e: on a phone the first record starts at {top:.0f} px, below the first screen (844 px)")
        shot(page, "records-phone")
        page.get_by_text("Menu: Records").click()
        expect(page.get_by_role("link", name="Logs", exact=True)).to_be_visible()
        shot(page, "menu-phone")
        wide = []
        for path in ["", "/schema", "/deploy", "/records?type=Everything", "/records/view?name=hostile", "/users", "/tokens", "/subscriptions",
                     "/shares", "/usage", "/telemetry", "/logs", "/audit", "/team", "/records/new?type=Everything", "/schema/indexes?field=Note.title",
                     "/deploy/progress", "/console", "/console/operators", "/console/server", "/console/operators/e2e-operator%40example.com/password"]:
            page.goto(BASE + (path if path.startswith("/console") else f"/console/c/{CONTAINER}{path}"))
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if overflow > 0:
                culprits = page.evaluate(WIDE_ELEMENTS)
                wide.append(f"{path or '/'} by {overflow} px ({culprits})")
        if wide:
            raise SystemExit(f"console e2e: pages wider than a phone's screen: {wide}")
        page.set_viewport_size({"width": 1280, "height": 900})

        step("sign out")
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/console/signin"))
        page.goto(BASE + "/console")
        expect(page).to_have_url(re.compile(r"/console/signin$"))
        browser.close()
    if dialogs:
        raise SystemExit(f"console e2e: a script from the data ran (dialogs: {dialogs})")
    if inaccessible:
        raise SystemExit("console e2e: axe-core found serious or critical accessibility problems:\n" + "\n".join(inaccessible))
    csp = [text for text in errors if "Content Security Policy" in text]
    if csp:
        raise SystemExit(f"console e2e: the page broke its own Content-Security-Policy: {csp}")
    print(f"console e2e: every step passed; {len(shots)} screenshots in {OUT}", flush=True)


if __name__ == "__main__":
    main()
