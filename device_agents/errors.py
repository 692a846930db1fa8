"""Typed errors of the device agent package.

This package runs on small devices and must not import the rest of edgekit, so its errors do not
derive from :class:`edgekit.core.errors.EdgekitError`; the edgekit CLI maps :class:`AgentError` (and every
subclass) to one ``error: <message>`` line and exit code 2 all the same.

Every error carries a short machine-readable ``code``; the agent sends that code with the message to
the host, and the client turns it back into the matching class (see :func:`from_code`).
"""

from __future__ import annotations


class AgentError(Exception):
    """Base class of every error of the agent, its protocol, its transports and its client."""

    code = "agent_error"


class ProtocolError(AgentError):
    """Malformed frames or messages: bad magic, bad CRC, oversize frame, undecodable payload."""

    code = "protocol_error"


class LinkError(AgentError):
    """The link (serial port, TCP socket, pty) failed, closed, or cannot be opened."""

    code = "link_error"


class LinkTimeout(LinkError):
    """The peer did not answer within the timeout, after the allowed retransmissions."""

    code = "timeout"


class AuthError(AgentError):
    """The HMAC challenge-response of HELLO failed (missing or wrong token)."""

    code = "auth_error"


class VersionMismatch(AgentError):
    """Host and agent speak different protocol versions."""

    code = "version_mismatch"


class InputError(AgentError):
    """Host-side: arguments to the client that cannot be sent (wrong shapes, dtypes, missing files)."""

    code = "input_error"


class RemoteError(AgentError):
    """A typed error the agent reported for one request (it keeps serving afterwards).

    ``remote_code`` is the agent-side error code (for example ``bundle_error``, ``not_found``,
    ``quota_exceeded``, ``bad_request``, ``runtime_error``), ``message`` its one-line text.
    """

    code = "remote_error"

    def __init__(self, remote_code: str, message: str):
        self.remote_code = remote_code
        self.message = message
        super().__init__(f"agent error [{remote_code}]: {message}")


def from_code(remote_code: str, message: str) -> AgentError:
    """The host-side exception for an error the agent reported with ``remote_code``."""
    from .bundle import BundleError  # bundle.py imports this module, so not at the top

    local = {
        AuthError.code: AuthError,
        VersionMismatch.code: VersionMismatch,
        ProtocolError.code: ProtocolError,
        BundleError.code: BundleError,
    }.get(remote_code)
    if local is not None:
        return local(f"agent: {message}")
    return RemoteError(remote_code, message)
