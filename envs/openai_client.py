"""One stdlib client for OpenAI-compatible ``/chat/completions`` servers.

Used wherever a model outside the actor graph is asked something: τ²'s LLM user, Hard20's
rubric judge, the RTI roles of the "larger model" ablation (``rti_actors.rti.roles``), and
OPD's teacher, which asks ``/completions`` for the log-probs of a token-id prompt
(``prompt_logprobs``). ``envs`` owns it because environments may not import ``rti_actors``.

The API key comes from ``api_key`` or the environment variable ``api_key_env``; it is sent
as a bearer token and nowhere else. It never appears in ``repr``, error messages or pickles:
an unpickled client reads ``api_key_env`` again in its new process, and a client holding an
inline key refuses to be pickled. It goes only over https, unless the host is loopback
(127.0.0.0/8, ::1, localhost) or the endpoint dict says ``allow_insecure_key=True``, and
redirects are not followed (urllib would resend the Authorization header to wherever they
point). Failures raise ``RuntimeError`` naming the endpoint (HTTP status with the start of
the server's answer, unreachable, timeout); a server that answers with native tool calls
gets them written into the text in the library's ``<tool_call>`` convention.
"""

from __future__ import annotations

import copy
import hmac
import ipaddress
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request

from envs.tool_calls import format_tool_call

DEFAULT_KEY_ENV = "OPENAI_API_KEY"
REDACTED = "***"  # what configs show and save in place of an inline key


def inline_key_message(key_env: str | None) -> str:
    where = f"the environment variable {key_env!r}" if key_env else "an environment variable named by 'api_key_env'"
    return (f"an inline api_key is never pickled or saved (Ray would carry it in actor arguments, checkpoints would "
            f"write it to disk): put the key in {where} on every node (before `ray start`, or before build() for a "
            "local cluster) and leave 'api_key' out of the endpoint dict")


class Secret:
    """An inline key held by a config: ``***`` in repr, str and JSON (``default=str``), equal
    by value, and never pickled, since pickles travel to other processes and into files."""

    __slots__ = ("_value", "_key_env")

    def __init__(self, value: str, key_env: str | None = None):
        self._value, self._key_env = value, key_env

    def reveal(self) -> str:
        return self._value

    @property
    def key_env(self) -> str | None:
        return self._key_env

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)  # nothing derived from the value

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError(inline_key_message(self._key_env))


def key_may_go_to(url: str) -> bool:
    """Whether a bearer key may be sent to ``url``: https, or a loopback host."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
    except ValueError:
        return False
    if parts.scheme == "https":
        return True
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # the 30x is raised as an HTTPError instead of resending the key to newurl


_OPENER = urllib.request.build_opener(_NoRedirects)


class OpenAIChatClient:
    def __init__(self, base_url: str = "", model: str = "default", api_key: str | Secret | None = None,
                 api_key_env: str | None = DEFAULT_KEY_ENV, temperature: float = 0.0, max_tokens: int | None = None,
                 timeout: float = 120.0, extra_body: dict | None = None, purpose: str = "endpoint",
                 allow_insecure_key: bool = False):
        if not base_url or not model:
            raise ValueError(f"the {purpose} needs base_url (e.g. http://localhost:8000/v1) and model")
        base = base_url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.completions_url = self.url.rsplit("/chat/completions", 1)[0] + "/completions"
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.timeout, self.extra_body, self.purpose = timeout, dict(extra_body or {}), purpose
        if (api_key_env is not None and not isinstance(api_key_env, str)) or not isinstance(allow_insecure_key, bool):
            raise ValueError(f"the {purpose}'s api_key_env must be an environment variable name (or None) and "
                             "allow_insecure_key True or False")
        self.api_key_env, self.allow_insecure_key = api_key_env or None, allow_insecure_key
        if isinstance(api_key, Secret):
            api_key = api_key.reveal()
        if api_key is not None and not isinstance(api_key, str):
            raise ValueError(f"the {purpose}'s api_key must be a string (or left out, with api_key_env)")
        if api_key == REDACTED:  # a saved config, which never holds the key: it must come from the environment
            if not self._env_key():
                raise ValueError(f"the {purpose} {self.url} has api_key={REDACTED!r}, a key left out of a saved "
                                 f"config: set the environment variable {self.api_key_env!r} (its api_key_env)")
            api_key = None
        self._inline = bool(api_key)
        self._api_key = api_key or self._env_key()
        self._needs_key = bool(self._api_key)  # an unpickled copy must find it again
        self._key()

    def _env_key(self) -> str | None:
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None

    def _key(self) -> str | None:
        """The key to send, after checking that it may go to this URL."""
        if self._needs_key and not self._api_key:
            raise ValueError(f"the {self.purpose} {self.url} needs the key in the environment variable "
                             f"{self.api_key_env!r}, which is not set in this process (pid {os.getpid()} on "
                             f"{socket.gethostname()}): set it on every node")
        if self._api_key and not self.allow_insecure_key and not key_may_go_to(self.url):
            source = "api_key" if self._inline else f"api_key_env={self.api_key_env!r}"
            raise ValueError(f"the {self.purpose} {self.url} is not https and not a loopback host, so the API key "
                             f"would cross the network unencrypted: use https://, leave the key ({source}) unset if "
                             "the server needs none, or set allow_insecure_key=True in the endpoint dict if this "
                             "network is trusted")
        return self._api_key

    def _scrub(self, text: str) -> str:
        return text.replace(self._api_key, REDACTED) if self._api_key else text

    def __repr__(self) -> str:
        return f"OpenAIChatClient(url={self.url!r}, model={self.model!r}, api_key={REDACTED if self._api_key else None})"

    # pickles travel (Ray actor arguments) and land in files: the key stays behind, and an
    # unpickled client reads api_key_env in its own process; an inline key has no such name
    def __getstate__(self) -> dict:
        if self._inline:
            raise TypeError(f"the {self.purpose} client: " + inline_key_message(self.api_key_env))
        return {**self.__dict__, "_api_key": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._api_key = self._env_key()
        self._key()

    def __deepcopy__(self, memo):  # a copy in this process may keep the key
        clone = object.__new__(type(self))
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone

    def __call__(self, messages: list[dict] | str) -> str:
        """A chat callable: a message list (or one user prompt) -> the reply's text."""
        return self.chat(messages)

    def chat(self, messages: list[dict] | str, temperature: float | None = None, max_tokens: int | None = None) -> str:
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        body = {"model": self.model, "messages": messages,
                "temperature": self.temperature if temperature is None else temperature, **self.extra_body}
        if (max_tokens or self.max_tokens) is not None:
            body["max_tokens"] = max_tokens or self.max_tokens
        payload = self._post(self.url, body)
        try:
            message = payload["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{self.purpose} {self.url} answered without choices[0].message") from None
        text = message.get("content") or ""
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            args = fn.get("arguments") or "{}"
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                args = {}
            text += "\n" + format_tool_call(fn.get("name", ""), args)
        return text

    def prompt_logprobs(self, token_ids: list[int]) -> tuple[list[str] | None, list[float | None]]:
        """Each prompt token's log-probability given the tokens before it, from ``/completions``
        with the prompt as token ids (nothing is tokenised here) and ``echo``: the token texts
        the server's tokenizer gives those ids (None if it sends none) and one log-prob per id
        (the first is None: nothing precedes it). Servers return the model's own distribution
        (temperature 1)."""
        body = {"model": self.model, "prompt": list(token_ids), "max_tokens": 1, "temperature": 0.0,
                "echo": True, "logprobs": 1, **self.extra_body}
        payload = self._post(self.completions_url, body)
        try:
            logprobs = payload["choices"][0]["logprobs"]
            values = list(logprobs["token_logprobs"])[:len(token_ids)]
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(f"{self.purpose} {self.completions_url} answered without choices[0].logprobs."
                               "token_logprobs: it must echo the prompt's log-probs (echo=true, logprobs=1)") from None
        if len(values) < len(token_ids) or not all(isinstance(v, (int, float)) for v in values[1:]):
            raise RuntimeError(f"{self.purpose} {self.completions_url} returned {len(values)} prompt log-probs for "
                               f"{len(token_ids)} prompt tokens, or some that are not numbers")
        tokens = logprobs.get("tokens")
        return (list(tokens)[:len(token_ids)] if isinstance(tokens, list) else None), values

    def _post(self, url: str, body: dict) -> dict:
        """POST ``body`` as JSON with the key (checked for this URL) and return the JSON answer."""
        headers = {"Content-Type": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode())
        except urllib.error.HTTPError as e:
            detail = self._scrub(e.read().decode(errors="replace")[:500])
            raise RuntimeError(f"{self.purpose} {url} answered HTTP {e.code}: {detail}") from None
        except urllib.error.URLError as e:
            raise RuntimeError(self._scrub(f"{self.purpose} {url} unreachable: {e.reason}")) from None
        except (OSError, ValueError) as e:  # read timeouts (not wrapped by urllib), non-JSON answers
            raise RuntimeError(self._scrub(f"{self.purpose} {url} failed: {type(e).__name__}: {e}")) from None

    def check(self) -> None:
        """Fail fast (e.g. at ``build()``) when the server cannot be reached."""
        base = self.url.rsplit("/chat/completions", 1)[0]
        try:
            urllib.request.urlopen(base + "/models", timeout=min(self.timeout, 10)).close()
        except urllib.error.HTTPError:
            return  # reachable; some servers do not list models
        except (urllib.error.URLError, OSError) as e:
            raise ValueError(f"{self.purpose} {base} is unreachable ({e})") from None
