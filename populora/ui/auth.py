"""The UI's optional login: an access token the operator sets, asked for before any page renders.

The UI can start and stop training runs, so anyone who can reach it can spend the machine. On localhost (the
default) that is only you; to expose it further, set ``POPULORA_UI_TOKEN`` (a long random string, e.g.
``python -c "import secrets; print(secrets.token_urlsafe(32))"``) in the environment of ``populora ui`` and give
it only to the people who may launch runs. Each browser session asks for it once. Serve the UI over TLS (a
reverse proxy, or Streamlit's ``server.sslCertFile``) or the token crosses the network in clear.

For single sign-on, put the UI behind an authenticating proxy (oauth2-proxy and the like), or use Streamlit's
own OIDC login (``st.login``, configured in ``.streamlit/secrets.toml`` under ``[auth]``; see docs/ui.md).
"""

from __future__ import annotations

import hmac
import os
import time

import streamlit as st

ENV_TOKEN = "POPULORA_UI_TOKEN"
_SESSION_KEY = "populora_signed_in"


def expected_token() -> str | None:
    return os.environ.get(ENV_TOKEN) or None


def token_matches(given: str, expected: str) -> bool:
    """Constant-time comparison: the time taken says nothing about how much of the token was right.

    >>> token_matches("s3cret", "s3cret"), token_matches("s3cre", "s3cret"), token_matches("", "s3cret")
    (True, False, False)
    """
    return hmac.compare_digest(given.encode(), expected.encode())


def require_login() -> None:
    """Return if no token is set or this session signed in; else draw the sign-in form and stop the script."""
    expected = expected_token()
    if expected is None or st.session_state.get(_SESSION_KEY):
        return
    st.title("PopuLoRA")
    with st.form("sign_in"):
        given = st.text_input("Access token", type="password", key="sign_in_token",
                              help=f"Set by whoever runs this UI ({ENV_TOKEN})")
        submitted = st.form_submit_button("Sign in", type="primary")
    if submitted:
        if token_matches(given, expected):
            st.session_state[_SESSION_KEY] = True
            st.rerun()
        time.sleep(1.0)  # slows down guessing
        st.error("Wrong token.")
    st.stop()
