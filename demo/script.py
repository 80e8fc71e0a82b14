"""The scripted model behind demo/cassettes: an Anthropic Messages API on 127.0.0.1 that answers
each step of workflows/jwt-migration.toml from a fixed script (its first message picks the
step's script, replies go in order). It is not a model: it is how the shipped cassette was made,
so the first command of the README runs the real tools with no key. Record a real one with
`runner run workflows/jwt-migration.toml --workdir target/demo --record demo/cassettes` and a key.

    python3 demo/script.py 8787 &
    ANTHROPIC_BASE_URL=http://127.0.0.1:8787 ANTHROPIC_API_KEY=scripted \
        runner run workflows/jwt-migration.toml --workdir target/demo --record demo/cassettes
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS = '''"""Signed access tokens (JWT compact form, HMAC-SHA256) replacing server-side sessions."""
import base64
import hashlib
import hmac
import json
import time


def _b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret, body):
    return _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())


def issue(user, secret, ttl=900, now=None):
    """A token for `user`, valid for `ttl` seconds."""
    now = int(time.time() if now is None else now)
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64(json.dumps({"sub": user, "exp": now + ttl}).encode())
    return f"{header}.{payload}.{_sign(secret, header + '.' + payload)}"


def verify(token, secret, now=None):
    """The user a valid token belongs to, or None."""
    try:
        header, payload, signature = token.split(".")
    except ValueError:
        return None
    if not hmac.compare_digest(_sign(secret, header + "." + payload), signature):
        return None
    claims = json.loads(_unb64(payload))
    return claims["sub"]
'''

TESTS = '''import unittest

from src.jwt_tokens import issue, verify


class TokenTest(unittest.TestCase):
    def test_a_token_names_its_user(self):
        self.assertEqual(verify(issue("ada", b"key", now=100), b"key", now=200), "ada")

    def test_another_key_is_refused(self):
        self.assertIsNone(verify(issue("ada", b"key", now=100), b"other", now=200))

    def test_an_expired_token_is_refused(self):
        self.assertIsNone(verify(issue("ada", b"key", ttl=10, now=100), b"key", now=200))


if __name__ == "__main__":
    unittest.main()
'''

USAGE = {"input_tokens": 1200, "output_tokens": 180}


def tool(name, arguments, text="Let me look."):
    return {"content": [{"type": "text", "text": text},
                        {"type": "tool_use", "id": f"tu_{name}_{len(json.dumps(arguments))}", "name": name, "input": arguments}],
            "stop_reason": "tool_use", "usage": USAGE}


def answer(text):
    return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": USAGE}


SCRIPTS = {
    "authenticates users": [
        tool("grep", {"pattern": "def (login|current_user)"}),
        answer("- src/auth.py:10 `login(user, password)`: checks a SHA-256 password hash with "
               "`hmac.compare_digest`, then creates a server-side session and returns its id.\n"
               "- src/auth.py:19 `current_user(cookie)`: reads the user from the session store."),
    ],
    "sessions are created": [
        tool("read_file", {"path": "src/session.py"}),
        answer("- src/session.py: `SESSIONS`, an in-memory dict from session id to user.\n"
               "- `create(user)` (line 7) makes a random id, `user_of(id)` (line 14) reads it, "
               "`expire(id)` (line 19) deletes it. Nothing else reads the store."),
    ],
    "Design a migration": [
        answer("1. Add src/jwt_tokens.py: `issue(user, secret, ttl)` and `verify(token, secret)` "
               "for HS256 tokens in JWT compact form, with an expiry.\n"
               "2. Test issuing, a wrong key and expiry in tests/test_jwt.py.\n"
               "3. Later: `login` returns a token behind a flag; `current_user` accepts both until "
               "the sessions are gone."),
    ],
    "Implement this plan": [
        tool("write_file", {"path": "src/jwt_tokens.py", "content": TOKENS}, "Adding the token module."),
        tool("write_file", {"path": "tests/test_jwt.py", "content": TESTS}, "And its tests."),
        answer("Added src/jwt_tokens.py (issue and verify HS256 tokens) and tests/test_jwt.py."),
        # The check (the project's tests) failed: an expired token was accepted.
        tool("edit_file", {"path": "src/jwt_tokens.py",
                           "old_string": '    claims = json.loads(_unb64(payload))\n    return claims["sub"]\n',
                           "new_string": '    claims = json.loads(_unb64(payload))\n'
                                         '    if claims["exp"] < int(time.time() if now is None else now):\n'
                                         '        return None\n'
                                         '    return claims["sub"]\n'},
             "The expiry was never checked; fixing verify."),
        answer("Added src/jwt_tokens.py (issue and verify HS256 tokens, expiry enforced) and "
               "tests/test_jwt.py; the test suite passes."),
    ],
    "Review the JWT migration": [
        answer("No blocking findings. Signatures are compared in constant time and expiry is "
               "enforced. Before the tokens replace sessions: keep the secret out of the code, "
               "and add a `kid` header so the key can be rotated."),
    ],
}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        first = json.dumps(body["messages"][0])
        for marker, replies in SCRIPTS.items():
            if marker in first:
                reply = replies.pop(0) if replies else answer("(the script has no more replies)")
                break
        else:
            reply = answer("(no script for this step)")
        reply = {"id": "msg_scripted", "type": "message", "role": "assistant", "model": body["model"], **reply}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
