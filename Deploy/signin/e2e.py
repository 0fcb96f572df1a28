#!/usr/bin/env python3
"""Where the sign-in page hands a session, in Debian's Chromium with Playwright, as a person signs in.

    e2e.py SERVER_URL ADMIN_TOKEN OUTPUT_DIR

Two small web apps on this machine open Stratus's sign-in page in a popup (a click, as CloudKit JS
does with AUTHENTICATION_REQUIRED's redirectURL) and wait for the session to be posted back:
- with a production API token that names the first app's origin: the first app receives the
  session and uses it; the second, on an origin the token does not name, receives nothing, though
  the person signed in on the genuine page;
- with a production token that names no origins: the popup explains that the app must be
  registered, and offers no form;
- with a development token that names no origins: an app on localhost receives the session; the
  same app under another host name (mapped to this machine in Chromium) gets the explanation.
And an app that sets up sign-in as CloudKit JS 1.2.0 does (`ckSession=null` while signed out) is
answered AUTHENTICATION_REQUIRED with the sign-in URL, shows its sign-in button, and signs in.
Screenshots go to OUTPUT_DIR. Fails (exit 1) on the first thing that is not so.
"""
import json
import os
import sys
import urllib.parse
import urllib.request

from playwright.sync_api import sync_playwright

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testapp  # noqa: E402

BASE, ADMIN, OUT = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
CONTAINER = "iCloud.com.example.Origins"
OTHER_HOST = "app.example.test"
os.makedirs(OUT, exist_ok=True)

def api(method, path, body=None):
    request = urllib.request.Request(BASE + path, data=json.dumps(body).encode() if body is not None else None, method=method)
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", "Bearer " + ADMIN)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


def fail(text):
    raise SystemExit(f"sign-in origins e2e: {text}")


def step(text):
    print(f"sign-in origins e2e: {text}", flush=True)


def open_sign_in(context, app_url, environment, token, name):
    return testapp.open_sign_in(context, BASE, CONTAINER, app_url, environment, token, OUT, name)


def expect_session(app, name):
    """The app receives a session by postMessage and can use it."""
    app.wait_for_function("window.received !== null", timeout=15000)
    received = app.evaluate("window.received")
    token = received["data"].get("ckSession")
    if not token or received["data"].get("ckWebAuthToken") != token:
        fail(f"{name}: the message holds no session: {received}")
    caller = app.evaluate("(token) => askCaller(token)", token)
    if caller["status"] != 200 or not (caller["user"] or "").startswith("_"):
        fail(f"{name}: users/caller with the received session answered {caller}")
    app.screenshot(path=os.path.join(OUT, f"{name}-app.png"))
    step(f"{name}: the app received the session and is signed in as {caller['user']}")


def signed_out_v1(context, app_url, token):
    """CloudKit JS 1.2.0's sign-in: ckSession=null is signed out, answered 421 with the sign-in URL."""
    name = "CloudKit JS 1.x, signed out"
    query = urllib.parse.urlencode({
        "signin": "", "caller": f"{BASE}/database/1/{CONTAINER}/production/public/users/caller?ckAPIToken={token}"})
    app = context.new_page()
    app.goto(f"{app_url}/app.html?{query}")
    first = app.evaluate("setUpAuthV1()")
    if first["status"] != 421 or first["code"] != "AUTHENTICATION_REQUIRED" or "/signin" not in (first["redirectURL"] or ""):
        fail(f"{name}: users/caller with ckSession=null answered {first}")
    if not app.is_visible("#signin-v1"):
        fail(f"{name}: the sign-in button did not appear")
    with app.expect_popup() as info:
        app.click("#signin-v1")
    popup = info.value
    popup.wait_for_load_state()
    testapp.sign_up(popup, "hopper@example.com")
    app.wait_for_function("window.received !== null", timeout=15000)
    session = app.evaluate("window.received")["data"].get("ckSession")
    if not session:
        fail(f"{name}: the popup's message holds no ckSession: {app.evaluate('window.received')}")
    second = app.evaluate("(session) => { window.v1.session = session; return setUpAuthV1(); }", session)
    if second["status"] != 200 or not (second["user"] or "").startswith("_"):
        fail(f"{name}: users/caller with the session answered {second}")
    app.screenshot(path=os.path.join(OUT, "cloudkit-js-1-app.png"))
    step(f"{name}: answered AUTHENTICATION_REQUIRED with the sign-in URL; signed in as {second['user']}")
    app.close()


def expect_nothing(app, popup, name, email):
    """The person signed in on the page, and the app on this origin received nothing."""
    app.wait_for_timeout(2500)
    if app.evaluate("window.received") is not None:
        fail(f"{name}: the app received {app.evaluate('window.received')}")
    users = api("GET", f"/management/1/containers/{CONTAINER}/users?environment=production")["users"]
    if not any(user["emailAddress"] == email for user in users):
        fail(f"{name}: the account of {email} was not made, so nothing was tested: {users}")
    step(f"{name}: the person signed up on the page; the app received nothing")


def expect_refusal(popup, name, words):
    text = popup.inner_text("main")
    if popup.query_selector("#form") is not None or "Sign-in is not available" not in text or words not in text:
        fail(f"{name}: the popup should explain instead of offering the form; it shows: {text!r}")
    step(f"{name}: the popup explains ({text.splitlines()[-1][:90]}…) and offers no form")


def main():
    registered_port, other_port = testapp.serve_app(), testapp.serve_app()
    registered = f"http://127.0.0.1:{registered_port}"
    unregistered = f"http://127.0.0.1:{other_port}"
    api("POST", "/management/1/containers", {"name": CONTAINER})
    named = api("POST", f"/management/1/containers/{CONTAINER}/tokens",
                {"environment": "production", "name": "web", "allowedOrigins": [registered]})["apiToken"]
    bare_production = api("POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "production", "name": "legacy"})["apiToken"]
    bare_development = api("POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "development", "name": "dev"})["apiToken"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=[f"--host-resolver-rules=MAP {OTHER_HOST} 127.0.0.1", "--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": 900, "height": 800})
            dialogs = []
            context.on("page", lambda page: page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss())))

            app, popup = open_sign_in(context, registered, "production", named, "registered")
            testapp.sign_up(popup, "ada@example.com")
            expect_session(app, "production, registered origin")

            signed_out_v1(context, registered, named)

            app, popup = open_sign_in(context, unregistered, "production", named, "unregistered")
            testapp.sign_up(popup, "grace@example.com")
            expect_nothing(app, popup, "production, an origin the token does not name", "grace@example.com")

            app, popup = open_sign_in(context, registered, "production", bare_production, "production-no-origins")
            expect_refusal(popup, "production, a token naming no origins", "registered address")

            app, popup = open_sign_in(context, f"http://localhost:{other_port}", "development", bare_development, "development-localhost")
            testapp.sign_up(popup, "lin@example.com")
            expect_session(app, "development, an app on localhost")

            app, popup = open_sign_in(context, f"http://{OTHER_HOST}:{other_port}", "development", bare_development, "development-elsewhere")
            expect_refusal(popup, f"development, an app on {OTHER_HOST}", "on this computer (localhost)")
            if dialogs:
                fail(f"dialogs opened: {dialogs}")
        finally:
            browser.close()
    print(f"sign-in origins e2e: passed; screenshots in {OUT}")


if __name__ == "__main__":
    main()
