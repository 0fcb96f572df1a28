#!/usr/bin/env python3
"""Stratus over HTTPS, as clients meet it: curl, Python's TLS client and Debian's Chromium.

    e2e.py SERVER_URL ADMIN_TOKEN OUTPUT_DIR CERT_DIR SERVER_PID REDIRECT_PORT

The server (Deploy/tls/e2e.sh starts it) serves CERT_DIR/live.pem and live.key, issued by the
throwaway authority CERT_DIR/ca.pem (Deploy/tls/make-certs.sh). Checked, in order:
- curl trusting ca.pem: /health answers 200 with Strict-Transport-Security; TLS 1.2 and 1.3 are
  spoken, TLS 1.1 is refused; a client that expects another host name refuses the certificate;
  plain HTTP sent to the TLS port is answered 400 saying to use https; the redirect port answers
  308 to the same path over https;
- a renewal on SIGHUP: with a long poll open on the web courier and a keep-alive connection
  idle, the files are replaced by another certificate and the server gets SIGHUP: new
  connections get the new certificate, the kept connection still answers with the old one, the
  long poll ends as a long poll does (204), not cut; an expired certificate swapped in is refused
  by the client; files that do not load are logged and the certificate in use stays;
- Chromium, trusting ca.pem through its certificate store: the console signs in over https and
  its cookie is Secure; an app opens the sign-in popup over https, the person signs up, the app
  receives the session and calls the API over https with it.
Screenshots go to OUTPUT_DIR. Fails (exit 1) on the first thing that is not so.
"""
import http.client
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "signin"))
import testapp  # noqa: E402

BASE, ADMIN, OUT, CERTS = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3], sys.argv[4]
PID, REDIRECT_PORT = int(sys.argv[5]), int(sys.argv[6])
HOST, PORT = urllib.parse.urlparse(BASE).hostname, urllib.parse.urlparse(BASE).port
CA = os.path.join(CERTS, "ca.pem")
CONTAINER = "iCloud.com.example.Https"
EMAIL, PASSWORD = "ops@example.com", "console password 1"
CONTEXT = ssl.create_default_context(cafile=CA)


def fail(text):
    raise SystemExit(f"https e2e: {text}")


def step(text):
    print(f"https e2e: {text}", flush=True)


def curl(*arguments):
    """curl's exit status, its output and its error text."""
    done = subprocess.run(["curl", "-sS", "--max-time", "20", *arguments], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def api(method, path, body=None, query="", admin=True):
    request = urllib.request.Request(BASE + path + query, data=json.dumps(body).encode() if body is not None else None, method=method)
    request.add_header("Content-Type", "application/json")
    if admin:
        request.add_header("Authorization", "Bearer " + ADMIN)
    try:
        with urllib.request.urlopen(request, timeout=30, context=CONTEXT) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def install(name):
    """Serves the certificate pair NAME from CERT_DIR and tells the server (SIGHUP)."""
    shutil.copy(os.path.join(CERTS, name + ".pem"), os.path.join(CERTS, "live.pem.new"))
    shutil.copy(os.path.join(CERTS, name + ".key"), os.path.join(CERTS, "live.key.new"))
    os.replace(os.path.join(CERTS, "live.pem.new"), os.path.join(CERTS, "live.pem"))
    os.replace(os.path.join(CERTS, "live.key.new"), os.path.join(CERTS, "live.key"))
    os.kill(PID, signal.SIGHUP)
    time.sleep(1.0)


def subject(connection):
    return dict(item[0] for item in connection.sock.getpeercert()["subject"])["commonName"]


def check_clients():
    status, out, err = curl("--cacert", CA, "-i", BASE + "/health")
    if status != 0 or " 200 " not in out.splitlines()[0] or "strict-transport-security: max-age=31536000" not in out.lower():
        fail(f"/health over https: exit {status}, {out!r} {err!r}")
    step("curl trusting the throwaway CA: /health 200 with Strict-Transport-Security")
    for version in ("1.2", "1.3"):
        status, out, err = curl("--cacert", CA, f"--tlsv{version}", "--tls-max", version, BASE + "/health")
        if status != 0:
            fail(f"TLS {version} refused: {err}")
    status, _, err = curl("--cacert", CA, "--tlsv1.1", "--tls-max", "1.1", BASE + "/health")
    if status == 0:
        fail("TLS 1.1 was accepted")
    step(f"TLS 1.2 and 1.3 spoken; TLS 1.1 refused (curl exit {status})")
    status, _, err = curl("--cacert", CA, "--resolve", f"elsewhere.example:{PORT}:127.0.0.1", f"https://elsewhere.example:{PORT}/health")
    if status != 60 or "elsewhere.example" not in err:
        fail(f"a client expecting another host accepted the certificate (exit {status}: {err})")
    step("a client that expects another host name refuses the certificate (curl exit 60)")
    status, out, err = curl("-i", f"http://{HOST}:{PORT}/health")
    if " 400 " not in out.splitlines()[0] or "this port speaks HTTPS" not in out:
        fail(f"plain HTTP on the TLS port: exit {status}, {out!r} {err!r}")
    step("plain HTTP sent to the TLS port: 400, 'this port speaks HTTPS'")
    status, out, err = curl("-i", "-X", "POST", "--data", "{}", f"http://{HOST}:{REDIRECT_PORT}/database/1/{CONTAINER}/development/public/records/query?x=1")
    location = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.lower().startswith("location:")), "")
    if " 308 " not in out.splitlines()[0] or location != f"{BASE}/database/1/{CONTAINER}/development/public/records/query?x=1":
        fail(f"the redirect port answered {out!r}")
    step(f"the redirect port: 308 to {location}")


def check_reload(api_token, web_token):
    created = api("POST", f"/device/1/{CONTAINER}/development/tokens/create",
                  {"apnsEnvironment": "development"}, query=f"?ckAPIToken={api_token}&ckWebAuthToken={urllib.parse.quote(web_token)}", admin=False)
    courier = urllib.parse.urlparse(created[1]["webcourierURL"]).path
    kept = http.client.HTTPSConnection(HOST, PORT, context=CONTEXT, timeout=30)
    kept.request("GET", "/health")
    kept.getresponse().read()
    before = subject(kept)
    poll = {}

    def long_poll():
        connection = http.client.HTTPSConnection(HOST, PORT, context=CONTEXT, timeout=30)
        started = time.time()
        connection.request("GET", courier + "?timeout=5")
        response = connection.getresponse()
        response.read()
        poll.update(status=response.status, seconds=time.time() - started, subject=subject(connection))

    waiting = threading.Thread(target=long_poll)
    waiting.start()
    time.sleep(1.0)
    install("server-b")
    fresh = http.client.HTTPSConnection(HOST, PORT, context=CONTEXT, timeout=30)
    fresh.request("GET", "/health")
    fresh_answer = fresh.getresponse()
    fresh_answer.read()
    if fresh_answer.status != 200 or subject(fresh) != "Stratus test server (renewed)":
        fail(f"after SIGHUP a new connection got {subject(fresh)!r}")
    kept.request("GET", "/health")
    answer = kept.getresponse()
    answer.read()
    if answer.status != 200 or subject(kept) != before:
        fail("the kept connection did not answer with its certificate after the reload")
    waiting.join(timeout=30)
    if poll.get("status") != 204 or poll.get("seconds", 0) < 4 or poll.get("subject") != before:
        fail(f"the long poll open across the reload ended {poll}")
    step(f"SIGHUP: new connections get the renewed certificate; the kept connection answers with {before!r}; "
         f"the long poll open across it ended 204 after {poll['seconds']:.1f} s")
    install("expired")
    status, _, err = curl("--cacert", CA, BASE + "/health")
    if status != 60 or "expired" not in err:
        fail(f"an expired certificate was not refused by curl (exit {status}: {err})")
    step("an expired certificate swapped in: curl refuses it (certificate has expired)")
    with open(os.path.join(CERTS, "live.pem"), "w") as garbage:
        garbage.write("not a certificate\n")
    os.kill(PID, signal.SIGHUP)
    time.sleep(1.0)
    status, _, err = curl("--cacert", CA, BASE + "/health")
    if status != 60 or "expired" not in err:
        fail(f"after unreadable files the server no longer serves the certificate in use (exit {status}: {err})")
    install("server")
    status, _, err = curl("--cacert", CA, BASE + "/health")
    if status != 0:
        fail(f"after the good pair came back: {err}")
    step("files that do not load: the server kept the certificate in use; the good pair serves again")


def check_browser(app_origin, api_token):
    from playwright.sync_api import expect, sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             args=["--no-sandbox", "--host-resolver-rules=MAP elsewhere.example 127.0.0.1"])
        try:
            context = browser.new_context(viewport={"width": 900, "height": 800})
            # Chromium checks the certificate: under a name it does not carry, the page does not load.
            elsewhere = context.new_page()
            try:
                elsewhere.goto(f"https://elsewhere.example:{PORT}/health")
                fail("Chromium loaded a page whose certificate names another host")
            except Exception as error:
                if "ERR_CERT" not in str(error):
                    raise
                step("Chromium refuses the certificate under another host name (net::ERR_CERT_…)")
            elsewhere.close()
            page = context.new_page()
            page.goto(BASE + "/console")
            page.locator("#email").fill(EMAIL)
            page.locator("#password").fill(PASSWORD)
            page.locator("#password").press("Enter")
            expect(page.locator("header .who")).to_contain_text(EMAIL)
            page.screenshot(path=os.path.join(OUT, "console.png"))
            cookies = [cookie for cookie in context.cookies() if cookie["domain"] == HOST]
            if not cookies or not all(cookie["secure"] and cookie["httpOnly"] for cookie in cookies):
                fail(f"the console's cookies over https: {cookies}")
            step(f"Chromium: the console signed in over {BASE} (its certificate trusted through the CA); its cookie is Secure and HttpOnly")

            app, popup = testapp.open_sign_in(context, BASE, CONTAINER, app_origin, "production", api_token, OUT, "signin")
            if not popup.url.startswith(BASE):
                fail(f"the sign-in popup is at {popup.url}")
            testapp.sign_up(popup, "reader@example.com")
            app.wait_for_function("window.received !== null", timeout=15000)
            token = app.evaluate("window.received")["data"].get("ckSession")
            caller = app.evaluate("(token) => askCaller(token)", token)
            if caller["status"] != 200 or not (caller["user"] or "").startswith("_"):
                fail(f"the app called the API over https with its session: {caller}")
            app.screenshot(path=os.path.join(OUT, "app.png"))
            step(f"Chromium: the sign-in popup over https handed the app a session; the app called the API with it as {caller['user']}")
        finally:
            browser.close()


def main():
    check_clients()
    api("POST", "/management/1/operators", {"emailAddress": EMAIL, "password": PASSWORD, "superuser": True})
    api("POST", "/management/1/containers", {"name": CONTAINER})
    dev_token = api("POST", f"/management/1/containers/{CONTAINER}/tokens", {"environment": "development", "name": "dev"})[1]["apiToken"]
    status, session = api("POST", f"/auth/1/{CONTAINER}/development/signup", {"emailAddress": "poller@example.com", "password": "correct horse"},
                          query=f"?ckAPIToken={dev_token}", admin=False)
    if status != 200:
        fail(f"sign-up over https answered {status}: {session}")
    check_reload(dev_token, session["ckWebAuthToken"])
    app_origin = f"http://localhost:{testapp.serve_app()}"
    prod_token = api("POST", f"/management/1/containers/{CONTAINER}/tokens",
                     {"environment": "production", "name": "web", "allowedOrigins": [app_origin]})[1]["apiToken"]
    check_browser(app_origin, prod_token)
    print(f"https e2e: passed; screenshots in {OUT}")


if __name__ == "__main__":
    main()
