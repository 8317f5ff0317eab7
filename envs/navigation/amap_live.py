"""The live backend: the same endpoints as ``OfflineAmap``, over HTTP to the Amap web API.

The key comes from the ``AMAP_MAPS_API_KEY`` environment variable only — never from
``env_config`` — because configs are logged and checkpointed. It is held in a private
attribute, left out of ``repr``, and scrubbed from every error message, since urllib
errors may echo the request URL (which carries ``key=``).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request

from envs.navigation.geo import AmapError

KEY_ENV = "AMAP_MAPS_API_KEY"
DEFAULT_BASE_URL = "https://restapi.amap.com"


class LiveAmap:
    """``request(path, params) -> dict``: one GET per call, Amap's JSON decoded."""

    def __init__(self, base_url: str = DEFAULT_BASE_URL, timeout_s: float = 10.0, api_key: str | None = None):
        key = api_key if api_key is not None else os.environ.get(KEY_ENV, "")
        if not key:
            raise ValueError(f"the live Amap backend needs an API key in the {KEY_ENV} environment variable; "
                             "leave backend='offline' to run without one")
        self.__key = key
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"LiveAmap(base_url={self.base_url!r}, key=<redacted>)"

    def __getstate__(self):
        raise TypeError("LiveAmap holds an API key and is never pickled; build it where it is used")

    def _scrub(self, text: str) -> str:
        # urlencode writes the key with quote_plus (a space becomes +, / becomes %2F); an
        # error may echo it raw, quoted either way, or JSON-escaped. Longest forms first.
        k = self.__key
        forms = {k, urllib.parse.quote(k), urllib.parse.quote(k, safe=""), urllib.parse.quote_plus(k),
                 json.dumps(k)[1:-1], json.dumps(k, ensure_ascii=False)[1:-1]}
        text = str(text)
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, "<redacted>")
        return text

    def request(self, path: str, params: dict) -> dict:
        query = {k: v for k, v in params.items() if v not in (None, "")}
        query["key"] = self.__key
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(query)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as e:
            raise AmapError("SERVICE_NOT_AVAILABLE", str(e.code), self._scrub(f"Amap answered HTTP {e.code}")) from None
        except Exception as e:  # URLError, timeouts, and ValueError for a bad URL (which quotes the URL)
            reason = getattr(e, "reason", e)
            raise AmapError("SERVICE_NOT_AVAILABLE", "-1", self._scrub(f"Amap is unreachable: {reason}")) from None
        try:
            data = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise AmapError("SERVICE_NOT_AVAILABLE", "-1", "Amap answered with something that is not JSON") from None
        if not isinstance(data, dict):
            raise AmapError("SERVICE_NOT_AVAILABLE", "-1", "Amap answered with JSON that is not an object")
        return json.loads(self._scrub(json.dumps(data, ensure_ascii=False)))
