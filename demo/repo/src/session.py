"""Server-side sessions, kept in memory."""
import secrets

SESSIONS = {}


def create(user):
    """Stores a new session for `user` and returns its id (the cookie value)."""
    session_id = secrets.token_hex(16)
    SESSIONS[session_id] = user
    return session_id


def user_of(session_id):
    """The user a session belongs to, or None."""
    return SESSIONS.get(session_id)


def expire(session_id):
    SESSIONS.pop(session_id, None)
