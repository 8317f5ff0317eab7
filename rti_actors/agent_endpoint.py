"""An OpenAI-compatible chat endpoint on loopback that records what the engines sample.

An env runner in agent mode (``rti_actors.agent_runner``) serves one of these; every episode
gets a path of its own, ``http://127.0.0.1:<port>/episodes/<key>/v1``, and its agent an
``openai.AsyncOpenAI`` client with that base URL. ``POST .../chat/completions`` renders the
request's messages with the policy's chat template, samples one turn from the engine pool
and answers a standard ``chat.completion``: the policy's tool calls parsed into
``tool_calls`` (with ids), ``finish_reason`` "tool_calls", "stop" or "length", usage counts.

The episode's record (``Recording``) is one ``TokenBuffer``, grown as the env runner grows
one: the opening, then per request the new messages and the generation prompt as context,
the sampled ids with their log-probs as generated. History is never re-tokenised. A request
extends the record when its messages begin with the recorded ones (the assistant turns as
this endpoint returned them, tools unchanged); only then is its prompt the recorded ids
plus the new messages' ids. A request that does not (the harness rewrote, cut or reordered
its history) is a *prefix break*: it is answered from a fresh render of its messages, and
nothing after it is recorded. The runner then drops the trajectory or keeps its recorded
part (``env_runners(on_prefix_break=...)``).

Sampling follows the run: the temperature and top-p of the run's ``SamplingParams``, since
the learner's ratio needs the behaviour log-probs at that temperature, and the run's seeds
(``request_seed``), so an episode samples the same tokens wherever it is played.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Callable

from aiohttp import web

from envs.openai_messages import from_openai, to_openai_call
from envs.tool_calls import split_reasoning
from policies.chat import ChatRenderer, TokenBuffer
from policies.engines import Generation, SamplingParams
from rti_actors.trajectory import EpisodeSpec

# Fields a request may carry. Others (stream_options, stop, response_format, penalties, ...)
# would change what is sampled or how it is sent, and are refused with a 400.
ACCEPTED = ("model", "messages", "tools", "tool_choice", "temperature", "top_p", "max_tokens",
            "max_completion_tokens", "n", "stream", "parallel_tool_calls", "logprobs", "top_logprobs", "seed",
            "user", "metadata", "store")


class BadRequest(ValueError):
    """A request this endpoint cannot serve; its message goes back in a 400."""


def _view(message: dict) -> dict:
    """What of a message the chat template renders: role, content and tool calls (the ids
    and a reasoning block the harness may drop are not compared)."""
    view = {"role": message["role"], "content": message.get("content") or ""}
    if message.get("tool_calls"):
        view["tool_calls"] = [{"name": c["name"], "arguments": c.get("arguments", {})} for c in message["tool_calls"]]
    return view


@dataclass
class Recording:
    """One episode as the endpoint recorded it: the token buffer, the messages it rendered
    (library form), what the harness is expected to send back (``views``), each sampled
    turn's span, weights version and text."""

    spec: EpisodeSpec
    sampling: SamplingParams
    max_len: int
    buf: TokenBuffer = field(default_factory=TokenBuffer)
    messages: list[dict] = field(default_factory=list)
    views: list[dict] = field(default_factory=list)
    tools: list[dict] | None = None
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    requests: int = 0
    context_truncated: bool = False
    prefix_break: str = ""   # why a request stopped extending the record ("" while none did)
    infra_error: str = ""    # the engines failed while serving this episode
    closed: bool = False
    # a continuation's replay: the first requests get these turns (recorded, or corrected)
    # instead of a sample, so the agent walks back to where the episode is continued from
    script: list[Generation] = field(default_factory=list)

    @property
    def recording(self) -> bool:
        return not self.prefix_break and not self.context_truncated


def check_request(body, sampling: SamplingParams) -> None:
    """Raise ``BadRequest`` naming what this endpoint does not serve."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - set(ACCEPTED))
    if unknown:
        raise BadRequest(f"unsupported field(s) {unknown}; this endpoint accepts {list(ACCEPTED)}")
    if body.get("stream"):
        raise BadRequest("stream=true is not supported; send stream=false (or leave it out)")
    if body.get("n", 1) != 1:
        raise BadRequest(f"n={body.get('n')!r}: this endpoint samples one choice per request; send n=1")
    if body.get("tool_choice") not in (None, "auto"):
        raise BadRequest(f"tool_choice={body.get('tool_choice')!r}: only 'auto' is served (the policy decides "
                         "whether to call a tool)")
    for key, run in (("temperature", sampling.temperature), ("top_p", sampling.top_p)):
        value = body.get(key)
        if value is not None and (not isinstance(value, (int, float)) or abs(float(value) - run) > 1e-9):
            raise BadRequest(f"{key}={value!r}: this endpoint samples at the run's {key}={run:g} (the learner needs "
                             f"the behaviour log-probs at it); leave {key} out or send {run:g}")
    if body.get("top_logprobs"):
        raise BadRequest("top_logprobs is not supported; send logprobs=true alone for the sampled tokens' log-probs")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise BadRequest(f"{key}={value!r} must be a positive integer")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list of chat messages")
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools)):
        raise BadRequest("tools must be a list of {'type': 'function', 'function': {...}} schemas")


class Endpoint:
    """The loopback server of one env runner; ``open`` a recording per episode."""

    def __init__(self, renderer: ChatRenderer, engines, max_len: int, seed_of: Callable[[EpisodeSpec, int], int]):
        # seed_of(spec, turn): the env runner's request seed, so both modes sample alike
        self.renderer, self.engines, self.max_len, self.seed_of = renderer, engines, max_len, seed_of
        self.episodes: dict[str, Recording] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> Endpoint:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/episodes/{key}/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def open(self, spec: EpisodeSpec, sampling: SamplingParams, script: list[Generation] | None = None) -> tuple[str, str]:
        """A new episode: (base URL, key). The key is the path and the API key. ``script``:
        the turns its first requests are answered with (a continuation's replay)."""
        key = secrets.token_hex(16)
        self.episodes[key] = Recording(spec, sampling, self.max_len, script=list(script or []))
        return f"http://127.0.0.1:{self.port}/episodes/{key}/v1", key

    def close(self, key: str) -> Recording:
        rec = self.episodes.pop(key)
        rec.closed = True
        return rec

    # ---- one request ------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.Response:
        rec = self.episodes.get(request.match_info["key"])
        if rec is None:
            return _error(404, "no open episode at this path (it has ended, or the key is wrong)")
        try:
            body = await request.json()
        except ValueError as e:
            return _error(400, f"the request body is not JSON: {e}")
        try:
            return web.json_response(await self.complete(rec, body))
        except BadRequest as e:
            return _error(400, str(e))
        except Exception as e:  # the engines failed: the episode is no evidence about the policy
            rec.infra_error = rec.infra_error or f"the engines failed serving a request: {type(e).__name__}: {e}"
            return _error(500, rec.infra_error, "server_error")

    async def complete(self, rec: Recording, body: dict) -> dict:
        check_request(body, rec.sampling)
        try:
            messages = [from_openai(m, i) for i, m in enumerate(body["messages"])]
        except ValueError as e:
            raise BadRequest(str(e)) from None
        if messages[-1]["role"] == "assistant":
            raise BadRequest("the last message is the assistant's; continuing a partial assistant turn is not supported")
        tools = body.get("tools") or None
        limit = min(body.get("max_tokens") or rec.sampling.max_tokens, body.get("max_completion_tokens") or rec.sampling.max_tokens)
        if rec.context_truncated:
            return self._answer(body, rec, [], None, 0)
        prompt, gp = self._prompt(rec, messages, tools)
        if len(prompt) + 1 > rec.max_len:  # nothing left to generate into: the episode is cut here
            if rec.recording:
                rec.context_truncated = True
            return self._answer(body, rec, [], None, len(prompt))
        sampling = rec.sampling if limit >= rec.sampling.max_tokens else replace(rec.sampling, max_tokens=limit)
        seed = self.seed_of(rec.spec, rec.requests)
        rec.requests += 1
        if rec.requests <= len(rec.script):
            gen = rec.script[rec.requests - 1]
        else:
            gen = (await self.engines.generate_async([prompt], sampling, [seed]))[0]
        if gp is not None and rec.recording:
            self._record(rec, gp, gen)
        return self._answer(body, rec, gen.token_ids, gen, len(prompt))

    def _prompt(self, rec: Recording, messages: list[dict], tools) -> tuple[list[int], list[int] | None]:
        """The prompt's ids, and the generation prompt to record (None: not recorded). The
        first request opens the record; later ones extend it or break it."""
        r = self.renderer
        if not rec.views and rec.recording:
            rec.messages, rec.buf = r.begin(messages, tools)
            rec.tools, rec.views = tools, [_view(m) for m in messages]
        elif rec.recording:
            problem = self._extends(rec, messages, tools)
            if problem:
                rec.prefix_break = f"request {rec.requests}: {problem}"
            else:
                new = messages[len(rec.views):]
                rec.buf.append_context(r.messages_ids(rec.messages, new))
                rec.messages += new
                rec.views += [_view(m) for m in new]
                if len(rec.buf) > rec.max_len:  # as in the env runner: the cut tokens never ship
                    rec.buf.truncate(rec.max_len)
                    rec.context_truncated = True
                    return rec.buf.ids, None
        if rec.recording:
            gp = r.generation_prompt_ids(rec.messages)
            return rec.buf.ids + gp, gp
        rendered, buf = r.begin(messages, tools)
        return buf.ids + r.generation_prompt_ids(rendered), None

    @staticmethod
    def _extends(rec: Recording, messages: list[dict], tools) -> str:
        """Why ``messages`` do not extend the record ("" when they do)."""
        if tools != rec.tools:
            return "the tools differ from the episode's first request"
        n = len(rec.views)
        if len(messages) <= n:
            return f"it has {len(messages)} messages, not more than the {n} recorded"
        for i, (old, new) in enumerate(zip(rec.views, messages)):
            if _view(new) != old:
                what = "the assistant turn returned there" if old["role"] == "assistant" else "the recorded message"
                return f"messages[{i}] ({new['role']}) differs from {what}"
        return ""

    def _record(self, rec: Recording, gp: list[int], gen: Generation) -> None:
        r, ids = self.renderer, gen.token_ids
        rec.buf.append_context(gp)
        start = len(rec.buf)
        rec.buf.append_generated(ids, gen.logprobs)
        rec.turn_spans.append((start, len(rec.buf)))
        rec.versions.append(gen.version)
        rec.buf.append_context(r.close_assistant_ids(ids))
        text = r.decode_turn(ids)["text"]
        rec.actions.append(text)
        rec.messages.append(r.decode_text(text))
        rec.views.append(_view(_message(r.decode_turn(ids))))
        if gen.finish_reason == "length" and len(rec.buf) >= rec.max_len - 1:
            rec.context_truncated = True

    def _answer(self, body: dict, rec: Recording, ids: list[int], gen: Generation | None, prompt_len: int) -> dict:
        turn = self.renderer.decode_turn(ids) if ids else {"text": "", "content": "", "tool_calls": [], "parse_error": None}
        message = _message(turn)
        if message.get("tool_calls"):
            message["tool_calls"] = [to_openai_call(c) for c in message["tool_calls"]]
        finish = ("length" if gen is None or gen.finish_reason == "length"
                  else "tool_calls" if message.get("tool_calls") else "stop")
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None,
                  "token_ids": list(ids)}  # the sampled ids, as vLLM's return_token_ids gives them
        if body.get("logprobs") and gen is not None:
            tok = self.renderer.tokenizer
            choice["logprobs"] = {"content": [
                {"token": tok.decode([i]), "logprob": lp, "bytes": list(tok.decode([i]).encode()), "top_logprobs": []}
                for i, lp in zip(ids, gen.logprobs)]}
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": str(body.get("model") or "policy"), "choices": [choice],
                "usage": {"prompt_tokens": prompt_len, "completion_tokens": len(ids), "total_tokens": prompt_len + len(ids)}}


def _message(turn: dict) -> dict:
    """A decoded turn as the assistant message returned (library-form tool calls). A turn
    whose calls do not parse is returned as its text, which is what the policy said."""
    if turn["parse_error"]:
        reasoning, text, _ = split_reasoning(turn["text"])
        content = text.strip()
    else:
        reasoning, content = turn.get("reasoning"), turn["content"]
    message = {"role": "assistant", "content": content or None}
    if turn["tool_calls"] and not turn["parse_error"]:
        message["tool_calls"] = list(turn["tool_calls"])
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": None}}, status=status)
