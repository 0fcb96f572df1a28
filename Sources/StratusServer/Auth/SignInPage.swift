import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore
import StratusStore

/// The sign-in and sign-up page `AUTHENTICATION_REQUIRED`'s `redirectURL` opens: plain HTML and a
/// little JavaScript, compiled into the binary. On success it hands the web auth token back the
/// way CloudKit JS expects (`Delivery`):
/// - when the API token has a sign-in callback URL, by going there with `?ckWebAuthToken=…`;
/// - otherwise, to the window that opened it (CloudKit JS's popup), by `postMessage` of
///   `{ckWebAuthToken, ckSession}` (CloudKit JS 1.x reads the first, 2.x the second), addressed
///   to named origins only, and closes; opened on its own, it says the user is signed in.
/// It never posts to `*`: a page anywhere could open it with an app's public API token and
/// receive the session of a person who signs in there. When there is no origin it may post
/// to, it shows why instead of the form.
/// A content security policy lets only its own script (by nonce) run and only Stratus be
/// contacted, and no other site may frame it.
struct SignInPage {
    /// Where a session made on the page goes.
    enum Delivery: Equatable {
        /// To the API token's sign-in callback URL.
        case callback(String)
        /// By `postMessage` to the opener, addressed to each of these origins (the browser
        /// delivers it only if the opener is on one of them).
        case post([String])
        /// Nowhere: the page explains this instead of showing the form.
        case refused(String)

        /// The rule: a token's callback, else its allowed origins; without either, in production
        /// nothing, and in development only the opener's origin, when the `Referer` of the page's
        /// request says it is on this computer (`localhost`, `127.0.0.1`, `[::1]`: an app in the
        /// making). A forged `Referer` gains nothing: `postMessage` checks the real opener.
        static func of(_ token: APITokenInfo?, environment: ContainerEnvironment, referer: String?, container: String) -> Delivery {
            if let callback = token?.signInCallback { return .callback(callback) }
            if let origins = token?.allowedOrigins, !origins.isEmpty { return .post(origins) }
            let register = "The app's administrator must register the app's web address (origin) with its API token, for example: "
                + "stratus token update --container \(container) <token id> --allowed-origin https://app.example.com"
            if environment == .production {
                return .refused("This app's API token names no web addresses, and in production the sign-in page hands a session only to "
                                + "an app at a registered address. " + register)
            }
            if let origin = referer.flatMap(WebOrigin.loopbackOrigin(ofReferer:)) { return .post([origin]) }
            return .refused("This app's API token names no web addresses. Without them, the sign-in page hands a session only to an app "
                            + "on this computer (localhost), and only in development. " + register)
        }
    }

    var container: String
    var environment: ContainerEnvironment
    var apiToken: String?
    var delivery: Delivery

    func response() -> Response {
        let nonce = TokenSealer.randomToken(prefix: "")
        var headers: HTTPFields = [
            .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
            .contentSecurityPolicy: "default-src 'none'; script-src 'nonce-\(nonce)'; style-src 'nonce-\(nonce)'; connect-src 'self'; "
                + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ]
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: html(nonce: nonce))))
    }

    /// The page's settings, as JSON safe inside a `<script>` element.
    var configuration: String {
        let base = "/auth/1/\(container)/\(environment.rawValue)"
        let query = apiToken.map { "?ckAPIToken=" + ($0.addingPercentEncoding(withAllowedCharacters: Authenticator.unreserved) ?? $0) } ?? ""
        var callback: JSON = .null
        var origins: [JSON] = []
        switch delivery {
        case .callback(let url): callback = .string(url)
        case .post(let list): origins = list.map { .string($0) }
        case .refused: break
        }
        let json: JSON = ["signIn": .string(base + "/signin" + query), "signUp": .string(base + "/signup" + query),
                          "callback": callback, "origins": .array(origins)]
        return JSONWriter.string(json).replacingOccurrences(of: "<", with: "\\u003c").replacingOccurrences(of: ">", with: "\\u003e")
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }

    /// The page's style sheet (under the page's nonce).
    static let style = """
            body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d1d1f; }
            main { max-width: 22rem; margin: 4rem auto; background: #fff; padding: 2rem; border-radius: 12px; box-shadow: 0 2px 12px rgba(0,0,0,.08); }
            h1 { font-size: 1.3rem; margin: 0 0 .25rem; } p.app { margin: 0 0 1.5rem; color: #555; font-size: .9rem; word-break: break-all; }
            label { display: block; margin: .75rem 0 .25rem; font-weight: 600; font-size: .9rem; }
            input[type=email], input[type=password], input[type=text] { width: 100%; box-sizing: border-box; padding: .6rem; border: 1px solid #bbb; border-radius: 6px; font: inherit; }
            .check { display: flex; gap: .5rem; align-items: center; font-weight: normal; }
            button { width: 100%; margin-top: 1.25rem; padding: .7rem; border: 0; border-radius: 6px; background: #0a66d8; color: #fff; font: inherit; font-weight: 600; cursor: pointer; }
            button.link { background: none; color: #0a66d8; margin-top: .75rem; padding: .25rem; font-weight: normal; }
            #message { min-height: 1.5rem; margin: 1rem 0 0; } #message.error { color: #b00020; } [hidden] { display: none !important; }
        """

    func html(nonce: String) -> String {
        let name = Self.escape(container)
        if case .refused(let reason) = delivery {
            return """
                <!doctype html>
                <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
                <title>Sign-in is not available for \(name)</title>
                <style nonce="\(nonce)">\(Self.style)</style></head>
                <body><main>
                <h1 id="title">Sign-in is not available</h1>
                <p class="app">for \(name) (\(environment.rawValue))</p>
                <p id="message" class="error" role="alert">\(Self.escape(reason))</p>
                </main></body></html>
                """
        }
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
            <title>Sign in to \(name)</title>
            <style nonce="\(nonce)">
            \(Self.style)
            </style></head>
            <body><main>
            <h1 id="title">Sign in</h1>
            <p class="app">to \(name) (\(environment.rawValue))</p>
            <form id="form" novalidate>
              <label for="email">Email address</label>
              <input id="email" name="email" type="email" autocomplete="username" required>
              <label for="password">Password</label>
              <input id="password" name="password" type="password" autocomplete="current-password" minlength="8" required>
              <div id="signup-fields" hidden>
                <label for="given">First name (optional)</label>
                <input id="given" name="given" type="text" autocomplete="given-name">
                <label class="check"><input id="discoverable" type="checkbox"> Let other users find me by my email address</label>
              </div>
              <button id="submit" type="submit">Sign in</button>
            </form>
            <button id="switch" class="link" type="button">New here? Create an account</button>
            <p id="message" role="alert"></p>
            </main>
            <script id="config" type="application/json">\(configuration)</script>
            <script nonce="\(nonce)">
            (function () {
              const config = JSON.parse(document.getElementById('config').textContent);
              const $ = (id) => document.getElementById(id);
              let signingUp = false;
              function show(text, isError) { $('message').textContent = text; $('message').className = isError ? 'error' : ''; }
              $('switch').addEventListener('click', () => {
                signingUp = !signingUp;
                $('signup-fields').hidden = !signingUp;
                $('title').textContent = signingUp ? 'Create an account' : 'Sign in';
                $('submit').textContent = signingUp ? 'Create account' : 'Sign in';
                $('switch').textContent = signingUp ? 'Have an account? Sign in' : 'New here? Create an account';
                $('password').autocomplete = signingUp ? 'new-password' : 'current-password';
                show('', false);
              });
              function deliver(token) {
                if (config.callback) {
                  const target = new URL(config.callback);
                  target.searchParams.set('ckWebAuthToken', token);
                  window.location.assign(target.toString());
                  return;
                }
                if (window.opener) {
                  const message = { ckWebAuthToken: token, ckSession: token };
                  for (const origin of config.origins) window.opener.postMessage(message, origin);
                  show('Signed in. This window closes now.', false);
                  window.close();
                  return;
                }
                show('Signed in. You can close this window and return to the app.', false);
              }
              $('form').addEventListener('submit', async (event) => {
                event.preventDefault();
                const body = { emailAddress: $('email').value.trim(), password: $('password').value };
                if (!body.emailAddress || !body.password) { show('Enter your email address and password.', true); return; }
                if (signingUp) {
                  if ($('given').value.trim()) body.givenName = $('given').value.trim();
                  if ($('discoverable').checked) body.discoverable = true;
                }
                $('submit').disabled = true;
                show(signingUp ? 'Creating your account…' : 'Signing in…', false);
                try {
                  const response = await fetch(signingUp ? config.signUp : config.signIn,
                                               { method: 'POST', headers: { 'content-type': 'text/plain' }, body: JSON.stringify(body) });
                  const answer = await response.json();
                  if (!response.ok || !answer.ckWebAuthToken) { show(answer.reason || 'That did not work; try again.', true); return; }
                  deliver(answer.ckWebAuthToken);
                } catch (error) {
                  show('Stratus cannot be reached; check your connection and try again.', true);
                } finally {
                  $('submit').disabled = false;
                }
              });
            })();
            </script>
            </body></html>
            """
    }
}
