#!/usr/bin/env python3
"""Drives Debian's headless Chromium through Stratus's sign-in page as a person would.

A small web app on its own origin (served here, http://127.0.0.1:<appPort>) asks Stratus for
users/caller, gets AUTHENTICATION_REQUIRED with a redirectURL, opens it in a popup (a click),
creates an account there, receives the web auth token (postMessage to the opener, or the API
token's sign-in callback URL) and calls users/caller with it. Chromium is spoken to over the
DevTools protocol on a pipe (--remote-debugging-pipe); only the standard library is used.

Usage: signin_driver.py '<json>' with keys chromium, appPort, outDir, scenarios: [{name, mode
("popup" | "callback"), stratus, container, apiToken, email, password}]. Prints one line
"RESULT <json>" with each scenario's findings; screenshots go to outDir.
"""
import base64
import fcntl
import http.server
import json
import os
import queue
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

APP_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Notes (test app)</title></head>
<body><h1>Notes</h1><p id="state">signed out</p>
<script>
const params = new URLSearchParams(location.search);
window.received = null;
window.addEventListener('message', (event) => { window.received = { origin: event.origin, data: event.data }; });
async function askCaller(webToken) {
  let url = params.get('stratus') + '/database/1/' + params.get('container') + '/development/public/users/caller?ckAPIToken='
    + encodeURIComponent(params.get('token'));
  if (webToken) url += '&ckWebAuthToken=' + encodeURIComponent(webToken);
  const response = await fetch(url);
  const body = await response.json();
  if (response.ok) document.getElementById('state').textContent = 'signed in as ' + body.userRecordName;
  return { status: response.status, body: body, session: response.headers.get('x-apple-cloudkit-session') };
}
</script></body></html>"""

DONE_PAGE = "<!doctype html><html><head><meta charset='utf-8'><title>Signed in</title></head><body><p>Back in the app.</p></body></html>"


class AppHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = urllib.parse.urlparse(self.path).path
        page = APP_PAGE if path == "/app.html" else DONE_PAGE if path == "/done" else None
        if page is None:
            self.send_error(404)
            return
        data = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class DevTools:
    """The DevTools protocol over Chromium's pipe: NUL-separated JSON messages on fds 3 and 4."""

    def __init__(self, chromium, profile):
        commands_read, self.commands = os.pipe()
        self.replies, replies_write = os.pipe()

        def place_pipes():
            high_read = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 20)
            high_write = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 20)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)

        arguments = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--remote-debugging-pipe",
                     "--user-data-dir=" + profile, "--window-size=900,800", "about:blank"]
        self.process = subprocess.Popen(arguments, preexec_fn=place_pipes, close_fds=False,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_read)
        os.close(replies_write)
        self.next_id = 0
        self.pending = {}
        self.events = queue.Queue()
        self.seen = []
        self.lock = threading.Lock()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        buffer = b""
        while True:
            chunk = os.read(self.replies, 65536)
            if not chunk:
                self.events.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self.lock:
                        waiter = self.pending.pop(message["id"], None)
                    if waiter:
                        waiter.put(message)
                else:
                    if message.get("method") == "Network.loadingFailed":
                        self.seen.append(message)
                    self.events.put(message)

    def send(self, method, params=None, session=None, timeout=20):
        with self.lock:
            self.next_id += 1
            ident = self.next_id
            waiter = queue.Queue()
            self.pending[ident] = waiter
        message = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.commands, json.dumps(message).encode() + b"\0")
        reply = waiter.get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, accept, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                event = self.events.get(timeout=max(0.05, deadline - time.time()))
            except queue.Empty:
                break
            if event is None:
                raise RuntimeError("chromium exited")
            if accept(event):
                return event
        raise RuntimeError("timed out waiting for a DevTools event")

    def evaluate(self, session, expression, gesture=False):
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True,
                                                 "userGesture": gesture}, session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def poll(self, session, expression, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                value = self.evaluate(session, expression)
            except RuntimeError:
                value = None
            if value:
                return value
            time.sleep(0.05)
        raise RuntimeError(f"timed out waiting for {expression}")

    def screenshot(self, session, path):
        data = self.send("Page.captureScreenshot", {"format": "png"}, session)["data"]
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def run_scenario(tools, scenario, app_port, out_dir):
    name = scenario["name"]
    found = {"name": name}
    query = urllib.parse.urlencode({"stratus": scenario["stratus"], "container": scenario["container"], "token": scenario["apiToken"]})
    app_url = f"http://127.0.0.1:{app_port}/app.html?{query}"
    target = tools.send("Target.createTarget", {"url": app_url})["targetId"]
    app = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    tools.send("Network.enable", {}, app)
    tools.poll(app, "document.readyState === 'complete' && typeof askCaller === 'function'")

    first = tools.evaluate(app, "askCaller(null)")
    found["first"] = {"status": first["status"], "serverErrorCode": first["body"].get("serverErrorCode")}
    redirect = first["body"].get("redirectURL")
    found["redirectURL"] = redirect
    if not redirect:
        return found

    # The person clicks "Sign in": the app opens redirectURL in a popup.
    tools.evaluate(app, f"window.popup = window.open({json.dumps(redirect)}, 'ckSignIn', 'width=480,height=640'); true", gesture=True)
    created = tools.wait_event(lambda e: e.get("method") == "Target.targetCreated"
                               and e["params"]["targetInfo"].get("openerId") == target)
    popup_target = created["params"]["targetInfo"]["targetId"]
    popup = tools.send("Target.attachToTarget", {"targetId": popup_target, "flatten": True})["sessionId"]
    tools.poll(popup, "document.readyState === 'complete' && !!document.getElementById('form')")
    tools.screenshot(popup, os.path.join(out_dir, f"{name}-1-sign-in.png"))
    tools.evaluate(popup, "document.getElementById('switch').click(); true")
    tools.screenshot(popup, os.path.join(out_dir, f"{name}-2-sign-up.png"))
    fill = (f"document.getElementById('email').value = {json.dumps(scenario['email'])};"
            f"document.getElementById('password').value = {json.dumps(scenario['password'])};"
            "document.getElementById('given').value = 'Ada';"
            "document.getElementById('form').requestSubmit(); true")
    tools.evaluate(popup, fill, gesture=True)

    if scenario["mode"] == "popup":
        received = tools.poll(app, "window.received")
        found["messageOrigin"] = received["origin"]
        found["messageKeys"] = sorted(received["data"].keys())
        token = received["data"].get("ckSession") or received["data"].get("ckWebAuthToken")
        found["sameTokenInBothKeys"] = received["data"].get("ckSession") == received["data"].get("ckWebAuthToken")
        found["popupClosed"] = bool(tools.poll(app, "window.popup.closed"))
    else:
        landed = tools.poll(popup, "location.href.indexOf('ckWebAuthToken=') >= 0 ? location.href : ''")
        found["landedOn"] = landed.split("?")[0]
        token = urllib.parse.parse_qs(urllib.parse.urlparse(landed).query)["ckWebAuthToken"][0]
        tools.screenshot(popup, os.path.join(out_dir, f"{name}-3-callback.png"))

    found["token"] = token
    second = tools.evaluate(app, f"askCaller({json.dumps(token)})")
    found["second"] = {"status": second["status"], "user": second["body"].get("userRecordName"),
                       "sessionHeader": second["session"] == token}
    tools.screenshot(app, os.path.join(out_dir, f"{name}-4-app.png"))
    return found


def main():
    settings = json.loads(sys.argv[1])
    os.makedirs(settings["outDir"], exist_ok=True)
    server = socketserver.ThreadingTCPServer(("127.0.0.1", settings["appPort"]), AppHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix="stratus-chromium-")
    tools = DevTools(settings["chromium"], profile)
    results = []
    try:
        tools.send("Target.setDiscoverTargets", {"discover": True})
        for scenario in settings["scenarios"]:
            try:
                results.append(run_scenario(tools, scenario, settings["appPort"], settings["outDir"]))
            except Exception as error:  # reported, and the test fails on it
                failures = [f"{e['params'].get('errorText')} {e['params'].get('corsErrorStatus', '')}".strip()
                            for e in tools.seen if e.get("method") == "Network.loadingFailed"]
                results.append({"name": scenario["name"], "error": str(error), "networkFailures": failures})
    finally:
        tools.close()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
