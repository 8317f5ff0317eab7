"""One stdlib client for OpenAI-compatible ``/chat/completions`` servers.

Used wherever a model outside the actor graph is asked something: τ²'s LLM user, Hard20's
rubric judge, and the RTI roles of the "larger model" ablation (``rti_actors.rti.roles``).
``envs`` owns it because environments may not import ``rti_actors``.

The API key comes from ``api_key`` or the environment variable ``api_key_env``; it is sent
as a bearer token and never appears in ``repr`` or in error messages. Failures raise
``RuntimeError`` naming the endpoint (HTTP status with the start of the server's answer,
unreachable, timeout); a server that answers with native tool calls gets them written
into the text in the library's ``<tool_call>`` convention.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

from envs.tool_calls import format_tool_call


class OpenAIChatClient:
    def __init__(self, base_url: str = "", model: str = "default", api_key: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", temperature: float = 0.0, max_tokens: int | None = None,
                 timeout: float = 120.0, extra_body: dict | None = None, purpose: str = "endpoint"):
        if not base_url or not model:
            raise ValueError(f"the {purpose} needs base_url (e.g. http://localhost:8000/v1) and model")
        base = base_url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.timeout, self.extra_body, self.purpose = timeout, dict(extra_body or {}), purpose
        self._api_key = api_key or os.environ.get(api_key_env) or None

    def __repr__(self) -> str:
        return f"OpenAIChatClient(url={self.url!r}, model={self.model!r}, api_key={'***' if self._api_key else None})"

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
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = json.loads(response.read().decode())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            raise RuntimeError(f"{self.purpose} {self.url} answered HTTP {e.code}: {detail}") from None
        except urllib.error.URLError as e:
            raise RuntimeError(f"{self.purpose} {self.url} unreachable: {e.reason}") from None
        except (OSError, ValueError) as e:  # read timeouts (not wrapped by urllib), non-JSON answers
            raise RuntimeError(f"{self.purpose} {self.url} failed: {type(e).__name__}: {e}") from None
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

    def check(self) -> None:
        """Fail fast (e.g. at ``build()``) when the server cannot be reached."""
        base = self.url.rsplit("/chat/completions", 1)[0]
        try:
            urllib.request.urlopen(base + "/models", timeout=min(self.timeout, 10)).close()
        except urllib.error.HTTPError:
            return  # reachable; some servers do not list models
        except (urllib.error.URLError, OSError) as e:
            raise ValueError(f"{self.purpose} {base} is unreachable ({e})") from None
