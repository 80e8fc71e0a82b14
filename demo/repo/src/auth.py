"""Logging in and finding the current user."""
import hashlib
import hmac

from src import session

USERS = {"ada": hashlib.sha256(b"lovelace").hexdigest()}


def login(user, password):
    """Checks the password and returns a session id, or None."""
    expected = USERS.get(user)
    given = hashlib.sha256(password.encode()).hexdigest()
    if expected is None or not hmac.compare_digest(expected, given):
        return None
    return session.create(user)


def current_user(cookie):
    """The user of the request's session cookie, or None."""
    return session.user_of(cookie)
