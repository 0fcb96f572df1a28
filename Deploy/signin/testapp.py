"""A small web app for the browser checks of the sign-in page (Deploy/signin/e2e.py,
Deploy/tls/e2e.py): a page that opens Stratus's sign-in page in a popup, as CloudKit JS does,
keeps what the popup posts back (`window.received`) and can call the API with the session
(`askCaller`), and sets up sign-in as CloudKit JS 1.2.0 does (`setUpAuthV1`), served over plain
HTTP on 127.0.0.1.
"""
import http.server
import os
import socketserver
import threading
import urllib.parse

APP_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Notes (test app)</title></head>
<body><h1>Notes</h1><p id="state">signed out</p><button id="signin">Sign in with Stratus</button>
<button id="signin-v1" hidden>Sign in (CloudKit JS 1.x)</button>
<script>
const params = new URLSearchParams(location.search);
window.received = null;
window.addEventListener('message', (event) => { window.received = { origin: event.origin, data: event.data }; });
document.getElementById('signin').addEventListener('click', () => {
  window.popup = window.open(params.get('signin'), 'ckSignIn', 'width=480,height=640');
});
// CloudKit JS 1.2.0's setUpAuth, as its source does it (_fetchAndHandleUserInfo and
// _handleSignInURL): the stored session, null while nobody is signed in, goes out as
// `ckSession=<encodeURIComponent(session)>`, so `ckSession=null`; AUTHENTICATION_REQUIRED's
// redirectURL becomes the sign-in button's popup, and the popup's message's ckSession the session.
window.v1 = { session: null, signInURL: null };
async function setUpAuthV1() {
  const response = await fetch(params.get('caller') + '&ckSession=' + encodeURIComponent(window.v1.session));
  const body = await response.json();
  if (response.status === 421 && body.serverErrorCode === 'AUTHENTICATION_REQUIRED' && body.redirectURL) {
    window.v1.signInURL = body.redirectURL;
    document.getElementById('signin-v1').hidden = false;
  } else if (response.ok) {
    document.getElementById('state').textContent = 'signed in as ' + body.userRecordName;
  }
  return { status: response.status, code: body.serverErrorCode || null, redirectURL: body.redirectURL || null,
           user: body.userRecordName || null };
}
document.getElementById('signin-v1').addEventListener('click', () => {
  window.popup = window.open(window.v1.signInURL, 'ckSignIn', 'width=480,height=640');
});
async function askCaller(webToken) {
  const url = params.get('caller') + '&ckWebAuthToken=' + encodeURIComponent(webToken);
  const response = await fetch(url);
  const body = await response.json();
  if (response.ok) document.getElementById('state').textContent = 'signed in as ' + body.userRecordName;
  return { status: response.status, user: body.userRecordName || null };
}
</script></body></html>"""


class AppHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if urllib.parse.urlparse(self.path).path != "/app.html":
            self.send_error(404)
            return
        data = APP_PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def serve_app():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), AppHandler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]



def open_sign_in(context, base, container, app_url, environment, token, out, name):
    """Opens the app, clicks its sign-in button; returns the app page and the popup, loaded."""
    query = urllib.parse.urlencode({
        "signin": f"{base}/auth/1/{container}/{environment}/signin?ckAPIToken={token}",
        "caller": f"{base}/database/1/{container}/{environment}/public/users/caller?ckAPIToken={token}"})
    app = context.new_page()
    app.goto(f"{app_url}/app.html?{query}")
    with app.expect_popup() as info:
        app.click("#signin")
    popup = info.value
    popup.wait_for_load_state()
    popup.screenshot(path=os.path.join(out, f"{name}-popup.png"))
    return app, popup


def sign_up(popup, email):
    popup.click("#switch")
    popup.fill("#email", email)
    popup.fill("#password", "correct horse battery")
    popup.click("#submit")
