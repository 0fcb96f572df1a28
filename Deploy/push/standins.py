"""Stand-ins for the push providers, for Deploy/push/e2e.py: an APNs server speaking HTTP/2 over
TLS (Python's h2), which checks each request as Apple documents it (the provider token's ES256
signature with the configured key's public half, its kid, iss and iat; the headers) and answers
as told; and a Web Push service (HTTPS) that decrypts each message with http_ece, the browser's
side of RFC 8291, and checks its VAPID token with py_vapid (RFC 8292). Neither is our code: if
Stratus's encryption or signatures were wrong, theirs would not accept them."""
import base64
import json
import socket
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import h2.config
import h2.connection
import h2.events
import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from py_vapid import Vapid02


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify_es256(token, public_key):
    """The JWT's header and claims when its ES256 signature is the key's; raises otherwise."""
    head, claims, signature = token.split(".")
    raw = b64url_decode(signature)
    if len(raw) != 64:
        raise ValueError(f"an ES256 signature is 64 bytes (r and s), not {len(raw)}")
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public_key.verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    return json.loads(b64url_decode(head)), json.loads(b64url_decode(claims))


class APNs:
    """APNs on 127.0.0.1 over TLS with ALPN h2. `keys`: key id → (team id, public key); `topic`:
    the bundle id every request must name (or a tuple of those one may name). `answers[token]`: a list of (status, headers, reason)
    answered to that token's next requests in turn (then 200); `stall`: tokens whose requests are
    never answered; `pad`: bytes of padding in every answer's body. Every request is kept in `received` (dicts), with the problems found in it
(`light`: only its time, for the benchmark)."""

    def __init__(self, cert, key, keys, topic, light=False):
        self.keys, self.topic, self.light = keys, topic, light
        self.answers, self.stall, self.verified = {}, set(), {}
        # Bytes of padding added to every answer's JSON body (200s too), to test the client's flow control.
        self.pad = 0
        self.received, self.problems = [], []
        self.lock = threading.Lock()
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.context.set_alpn_protocols(["h2"])
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(raw,), daemon=True).start()

    def serve(self, raw):
        try:
            sock = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            return
        with self.lock:
            self.connections += 1
        if sock.selected_alpn_protocol() != "h2":
            with self.lock:
                self.problems.append(f"ALPN chose {sock.selected_alpn_protocol()!r}, not h2")
            sock.close()
            return
        conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        streams, unsent = {}, {}
        while True:
            try:
                data = sock.recv(65535)
            except OSError:
                return
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    streams[event.stream_id] = {"headers": {k.decode() if isinstance(k, bytes) else k: v.decode() if isinstance(v, bytes) else v
                                                            for k, v in event.headers}, "body": b""}
                elif isinstance(event, h2.events.DataReceived):
                    streams[event.stream_id]["body"] += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    stream = streams.pop(event.stream_id)
                    answer = self.answer(stream["headers"], stream["body"])
                    if answer is not None:
                        status, headers, reason = answer
                        body = json.dumps({"reason": reason}).encode() if reason else b""
                        if self.pad:
                            body = json.dumps({"reason": reason, "padding": "x" * self.pad}).encode()
                        conn.send_headers(event.stream_id, [(":status", str(status)), ("apns-id", stream["headers"].get("apns-id", ""))]
                                          + list(headers.items()), end_stream=not body)
                        if body:
                            unsent[event.stream_id] = body
            # Bodies go as the client's flow-control windows allow (it must give credit back).
            for stream_id in list(unsent):
                body = unsent[stream_id]
                while body:
                    room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
                    if room <= 0:
                        break
                    conn.send_data(stream_id, body[:room], end_stream=len(body) <= room)
                    body = body[room:]
                if body:
                    unsent[stream_id] = body
                else:
                    del unsent[stream_id]
            try:
                sock.sendall(conn.data_to_send())
            except OSError:
                return

    def answer(self, headers, body):
        problems = []
        path = headers.get(":path", "")
        token = path.rsplit("/", 1)[-1]
        if headers.get(":method") != "POST" or not path.startswith("/3/device/"):
            problems.append(f"{headers.get(':method')} {path}: not POST /3/device/<token>")
        if not token or any(c not in "0123456789abcdef" for c in token):
            problems.append(f"device token {token!r} is not lowercase hex")
        auth = headers.get("authorization", "")
        claims = {}
        if not auth.startswith("bearer "):
            problems.append("no bearer provider token")
        else:
            try:
                head = json.loads(b64url_decode(auth[7:].split(".")[0]))
                team, public_key = self.keys[head.get("kid")]
                # A provider token is reused for many pushes: its signature is checked once.
                if auth not in self.verified:
                    self.verified[auth] = verify_es256(auth[7:], public_key)
                head, claims = self.verified[auth]
                if head.get("alg") != "ES256":
                    problems.append(f"alg {head.get('alg')}")
                if claims.get("iss") != team:
                    problems.append(f"iss {claims.get('iss')} is not the team {team}")
                if not (time.time() - 3600 < claims.get("iat", 0) <= time.time() + 60):
                    problems.append(f"iat {claims.get('iat')} is not within the last hour")
            except (KeyError, ValueError, InvalidSignature) as error:
                problems.append(f"provider token not valid: {error!r}")
        topics = (self.topic,) if isinstance(self.topic, str) else self.topic
        if headers.get("apns-topic") not in topics:
            problems.append(f"apns-topic {headers.get('apns-topic')!r} is not {' or '.join(map(repr, topics))}")
        kind, priority = headers.get("apns-push-type"), headers.get("apns-priority")
        if (kind, priority) not in (("background", "5"), ("alert", "10")):
            problems.append(f"apns-push-type {kind} with apns-priority {priority}")
        try:
            uuid.UUID(headers.get("apns-id", ""))
        except ValueError:
            problems.append(f"apns-id {headers.get('apns-id')!r} is not a UUID")
        if not headers.get("apns-expiration", "").isdigit():
            problems.append("apns-expiration is not a Unix time")
        if len(body) > 4096:
            problems.append(f"payload of {len(body)} bytes, over 4096")
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
            problems.append("payload is not JSON")
        with self.lock:
            queue = self.answers.get(token) or []
            answer = queue.pop(0) if queue else (200, {}, "")
            if token in self.stall:
                answer = None
            if self.light:
                self.received.append({"time": time.time()})
            else:
                self.received.append({"token": token, "headers": headers, "payload": payload, "claims": claims, "time": time.time(),
                                      "status": answer[0] if answer else None, "problems": problems})
            self.problems += problems
        if problems and answer and answer[0] == 200:
            return (400, {}, "BadRequest")
        return answer

    def delivered(self, token=None):
        """The requests answered 200 (to `token`)."""
        with self.lock:
            return [r for r in self.received if r["status"] == 200 and (token is None or r["token"] == token)]


class WebPush:
    """A Web Push service on 127.0.0.1 over HTTPS. `subscribe(name)` makes a browser's keys and
    the subscription to register; every POST to it is decrypted (http_ece) and its VAPID token
    verified (py_vapid), and kept in `received`. `gone`: names answered 410."""

    def __init__(self, cert, key):
        self.subscriptions, self.received, self.problems, self.gone = {}, [], [], set()
        self.lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                standin.receive(self.path, dict(self.headers.items()), body, self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def subscribe(self, name):
        private = ec.generate_private_key(ec.SECP256R1())
        from cryptography.hazmat.primitives import serialization
        public = private.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        auth = bytes(range(16))
        self.subscriptions[name] = (private, auth)
        b64 = lambda raw: base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        return {"endpoint": f"https://localhost:{self.port}/push/{name}", "keys": {"p256dh": b64(public), "auth": b64(auth)}}

    def receive(self, path, headers, body, handler):
        name = path.rsplit("/", 1)[-1]
        problems, message, vapid_key = [], None, None
        lowered = {k.lower(): v for k, v in headers.items()}
        if lowered.get("content-encoding") != "aes128gcm":
            problems.append(f"Content-Encoding {lowered.get('content-encoding')!r}")
        if not lowered.get("ttl", "").isdigit():
            problems.append("no TTL")
        auth = lowered.get("authorization", "")
        try:
            if not Vapid02.verify(auth):
                problems.append("the VAPID token's signature is not its key's")
            parts = dict(p.split("=", 1) for p in auth.split(" ", 1)[1].split(","))
            vapid_key = parts["k"].strip()
            claims = json.loads(b64url_decode(parts["t"].strip().split(".")[1]))
            if claims.get("aud") != f"https://localhost:{self.port}":
                problems.append(f"aud {claims.get('aud')!r}")
            if not (time.time() < claims.get("exp", 0) <= time.time() + 24 * 3600):
                problems.append(f"exp {claims.get('exp')} is not within a day")
            if not claims.get("sub", "").startswith(("mailto:", "https://")):
                problems.append(f"sub {claims.get('sub')!r} is neither mailto: nor https:")
        except Exception as error:  # py_vapid raises assertions and others on a malformed header
            problems.append(f"VAPID header not valid: {error!r} ({auth[:60]})")
        if name in self.subscriptions:
            private, secret = self.subscriptions[name]
            try:
                message = json.loads(http_ece.decrypt(body, private_key=private, auth_secret=secret, version="aes128gcm"))
            except Exception as error:
                problems.append(f"http_ece could not decrypt: {error!r}")
        else:
            problems.append(f"no subscription {name}")
        status = 410 if name in self.gone else 201
        with self.lock:
            self.received.append({"name": name, "message": message, "vapid_key": vapid_key, "status": status, "problems": problems})
            self.problems += problems
        handler.send_response(status)
        handler.send_header("content-length", "0")
        handler.end_headers()
