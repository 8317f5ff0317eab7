"""The Verifier's deterministic checks on a corrected step (its V2 verdict).

Each check returns human-readable failure strings; an empty list is a pass. A corrected
step must not leak (forbidden vocabulary), must not fake a tool result, must call real
tools with schema-valid arguments, and every fact it states or passes to a tool must be
grounded: present in the user's messages or in earlier tool outputs. The system prompt
(tool schemas, examples) and the agent's own earlier text are not grounding sources, and
``reward_evidence()`` never is — a fact found only there is exactly the leak we reject.

Grounding is judged on tokens, not meaning, so it is deliberately narrow about what counts
as a fact: "lon,lat" pairs, ids, numbers that are not small counts or common defaults,
dates, quoted names and Chinese proper-noun-shaped names (see each extractor).

What depends on the environment — which JSON keys mark one of its tool results, how far
apart two spellings of a coordinate may be — comes from ``ToolEnv.verifier_facts()``
(``facts=``); None means the base ``ToolEnv``'s facts.
"""

from __future__ import annotations

import calendar
import functools
import re

import jsonschema

from envs.base import DEFAULT_VERIFIER_FACTS
from envs.tool_calls import CLOSE_TAG, OPEN_TAG, parse_tool_calls
from envs.transcript import grounding_text
from rti_actors.rti.verdicts import json_objects

# ---- forbidden vocabulary ------------------------------------------------------------------
# English: whole words / phrases, case-insensitive. Kept to terms that name the grading
# machinery or a hidden earlier answer; words with everyday meanings in our domains are
# only listed inside phrases ("gold" is a product colour in retail, so only "gold answer",
# "gold standard", ...; "reference" is a booking reference, so only "reference answer").
# "correct"/"corrected"/"correctly" stay allowed: agents confirm and fix things for users.
_EN_TERMS = [
    r"reference (?:answers?|solutions?|routes?|trajector(?:y|ies))",
    r"rubrics?", r"(?:evaluation|grading|scoring|judging) (?:criteria|criterion|rubrics?|guidelines?)",
    r"previous drafts?", r"earlier drafts?", r"original drafts?", r"first drafts?",
    # "previous answer/response" stays allowed: the agent may refer to its own earlier
    # turn, which is in the context; an "attempt" or "original step" is not.
    r"original (?:answer|response|reply|step)s?", r"previous attempts?",
    r"corrections?", r"hint(?:s|ed)?",
    r"gold(?:en)? (?:answers?|labels?|standard|solutions?|parameters?|references?|annotations?|trajector(?:y|ies)|outputs?)",
    r"ground[- ]truth", r"expected (?:answers?|outputs?|solutions?|final state)", r"answer key",
    r"annotat(?:ed|ions?)", r"graders?", r"validator'?s?", r"verifier'?s?", r"corrector'?s?",
    r"reward evidence", r"privileged (?:information|evidence)",
    r"is_valid", r"error_types", r"suggest_next",  # keys of the Validator's JSON copied out
]
_EN = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(_EN_TERMS) + r")(?![A-Za-z0-9])", re.IGNORECASE)

# Chinese: substring match (no word boundaries), so only multi-character terms whose every
# use in an agent turn is about grading or a hidden answer. 提示 is the exception the spec
# asks for: it also names what a device or page shows (手机提示无服务, 温馨提示, 提示音) — common
# in telecom and customer service — so those compounds are allowed and bare 提示 ("根据提示")
# is flagged. 纠正/更正 are flagged like English "correction": a corrected step that says it
# corrects something refers to an error the context never showed. 参考路线 is not listed:
# "为您提供一条参考路线" (a suggested route) is ordinary Navigation wording.
_ZH_TERMS = ["参考答案", "标准答案", "正确答案", "参考解答", "评分标准", "评分细则", "评判标准", "评估标准",
             "评价标准", "打分标准", "金标准", "真实标签", "期望答案", "预期答案", "期望输出", "预期输出", "原回答",
             "原始回答", "原答案", "原稿", "草稿", "上一版", "纠正", "更正", "提示", "验证器", "校验器", "奖励证据",
             "标注答案", "标注数据"]
_ZH = re.compile("|".join(_ZH_TERMS))
_HINT_BEFORE = ("温馨", "系统", "错误", "屏幕", "页面", "界面", "手机", "设备", "语音", "弹窗", "弹出", "短信", "网页", "安全")
_HINT_AFTER = ("音", "框", "语", "信息", "消息", "栏", "窗", "灯")


def _innocent_hint(text: str, start: int) -> bool:
    before, after = text[max(0, start - 2):start], text[start + 2:start + 4]
    return before.endswith(_HINT_BEFORE) or after.startswith(_HINT_AFTER)


def _forbidden_hits(text: str, language: str | None) -> list[str]:
    hits = [m.group(0) for m in _EN.finditer(text)]
    if language != "en":
        hits += [m.group(0) for m in _ZH.finditer(text)
                 if not (m.group(0) == "提示" and _innocent_hint(text, m.start()))]
    return list({h.lower(): h for h in reversed(hits)}.values())[::-1]


def forbidden_words(text: str, language: str | None = None) -> list[str]:
    """Leakage vocabulary in ``text``. language "en": English terms only (Chinese appears in
    English turns only inside copied place names); "zh" or None: Chinese and English
    (Chinese turns still write "hint" or JSON keys in English)."""
    return [f"forbidden word {h!r}" for h in _forbidden_hits(text, language)]


# ---- fact extraction -----------------------------------------------------------------------
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
# Look-aheads allow a sentence-final period ("at 109.1,34.2.") but not more digits.
_PAIR = re.compile(r"(?<![\d.])(-?\d{1,3}\.\d+)\s*,\s*(-?\d{1,3}\.\d+)(?!\d|\.\d)")
_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)")
# An id: a token with a digit and either a letter, '#' or '_', or a long digit run; this
# covers B0700320F0, HAT001, #W1234567, mia_li_3668, credit_card_7815826, 1008292230,
# 029-76997311 (phone numbers), and never a plain price like 54.32.
_TOKEN = re.compile(r"#?[A-Za-z0-9][A-Za-z0-9_\-]*[A-Za-z0-9]|#?[A-Za-z0-9]")
# ASCII look-arounds: "约12.3公里" and "12.5km" hold numbers (CJK characters are \w).
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:\.\d+)?(?!\d|\.\d)")
#: numbers that are parameters, not facts: small counts and the usual radius / page sizes.
FREE_NUMBERS = frozenset({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 50, 100, 200, 300, 500, 1000, 1500, 2000,
                          3000, 5000, 10000, 20000, 30000, 50000})


def _is_id(token: str) -> bool:
    core = token.lstrip("#")
    if not any(c.isdigit() for c in core) or len(core) < 4:
        return False
    if any(c.isalpha() for c in core) or token.startswith("#") or "_" in core:
        return True
    return sum(c.isdigit() for c in core) >= 7  # phone numbers, long numeric ids


def _facts(text: str) -> dict[str, list]:
    """Split ``text`` into pairs, emails, dates, ids and remaining numbers (each span is
    claimed by the first kind that matches, so an id's digits are not also numbers)."""
    out = {"pairs": [], "emails": [], "dates": [], "ids": [], "numbers": []}
    rest = text
    for kind, rx in (("emails", _EMAIL), ("pairs", _PAIR), ("dates", _DATE)):
        out[kind] += [m.group(0) for m in rx.finditer(rest)]
        rest = rx.sub(" ", rest)
    def claim(m: re.Match) -> str:
        token = m.group(0)
        if _is_id(token) and not _NUMBER.fullmatch(token):
            out["ids"].append(token)
            return " "
        return token

    rest = _TOKEN.sub(claim, rest)
    out["numbers"] += [m.group(0) for m in _NUMBER.finditer(rest)]
    return out


@functools.lru_cache(maxsize=64)
def _history_index(history_text: str) -> dict:
    pairs = [(float(a), float(b)) for a, b in _PAIR.findall(history_text)]
    numbers = {float(n) for n in _NUMBER.findall(history_text)}
    numbers |= {float(x) for p in pairs for x in p}
    return {"pairs": pairs, "numbers": numbers, "lower": history_text.lower()}


def _facts_or_default(facts: dict | None) -> dict:
    return DEFAULT_VERIFIER_FACTS if facts is None else facts


def _pair_grounded(pair: str, history_text: str, tolerance: float) -> bool:
    if pair.replace(" ", "") in history_text.replace(" ", ""):
        return True
    lon, lat = (float(x) for x in pair.split(","))
    return any(abs(lon - a) <= tolerance and abs(lat - b) <= tolerance
               for a, b in _history_index(history_text)["pairs"])


def _number_grounded(number: str, history_text: str, derived: bool, free: frozenset) -> bool:
    value = float(number)
    if value.is_integer() and abs(value) in free:
        return True
    known = _history_index(history_text)["numbers"]
    if any(abs(value - h) <= 1e-9 * max(1.0, abs(h)) for h in known):
        return True
    if not derived:
        return False
    # A final answer restates tool numbers in other units (12345 m -> 12.3 km, 1530 s ->
    # 25 minutes, 5100 s -> 1 h 25 min): grounded if some tool number converts to it at the
    # precision it is written with (rounded or truncated).
    step = 10.0 ** -(len(number.split(".")[1]) if "." in number else 0)
    for h in known:
        for v in (h / 1000, h / 60, h / 3600, (h % 3600) / 60, h * 1000, h / 100):
            if abs(v - value) < step:
                return True
    return False


def _id_grounded(token: str, history_text: str) -> bool:
    core = token.lstrip("#")
    return core in history_text or core.lower() in _history_index(history_text)["lower"]


def _date_grounded(date: str, history_text: str) -> bool:
    if date in history_text:
        return True
    _, month, day = (int(x) for x in _DATE.match(date).groups())
    if not (1 <= month <= 12):
        return False
    low = _history_index(history_text)["lower"]
    if re.search(rf"(?<!\d)0?{month}\s*月\s*0?{day}(?!\d)", history_text):
        return True
    names = [calendar.month_name[month].lower(), calendar.month_abbr[month].lower()]
    return any(re.search(rf"\b{n}\.?\s+0?{day}(?:st|nd|rd|th)?\b|\b0?{day}(?:st|nd|rd|th)?\s+(?:of\s+)?{n}\b", low)
               for n in names)


def _ungrounded_facts(text: str, history_text: str, where: str, derived: bool, free: frozenset,
                      tolerance: float) -> list[str]:
    facts, problems = _facts(text), []
    for pair in facts["pairs"]:
        if not _pair_grounded(pair, history_text, tolerance):
            problems.append(f"{where}: coordinate {pair} does not appear in the user request or any earlier tool output")
    for token in facts["emails"] + facts["ids"]:
        if not _id_grounded(token, history_text):
            problems.append(f"{where}: id {token!r} does not appear in the user request or any earlier tool output")
    for date in facts["dates"]:
        if not _date_grounded(date, history_text):
            problems.append(f"{where}: date {date} does not appear in the user request or any earlier tool output")
    for number in facts["numbers"]:
        if not _number_grounded(number, history_text, derived, free):
            problems.append(f"{where}: number {number} does not appear in the user request or any earlier tool output")
    return problems


def _strings(value, path: str):
    """(path, text) for every scalar inside a tool-call argument value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, (int, float)):
        yield path, repr(value) if isinstance(value, float) else str(value)
    else:
        yield path, str(value)


def ungrounded_arguments(tool_calls: list[dict], history_text: str, free_numbers=FREE_NUMBERS, *,
                         facts: dict | None = None) -> list[str]:
    """Coordinates, ids, emails, dates and numbers in the calls' arguments that appear in
    neither the user request nor an earlier tool output (``history_text`` is exactly those).
    Integers in ``free_numbers`` are parameters, not facts (limits, radii, counts)."""
    tolerance = float(_facts_or_default(facts)["coordinate_tolerance_deg"])
    problems = []
    for call in tool_calls:
        for path, text in _strings(call.get("arguments") or {}, call.get("name", "?")):
            problems += _ungrounded_facts(text, history_text, f"argument {path}", False, frozenset(free_numbers),
                                          tolerance)
    return problems


# ---- names in a final answer ---------------------------------------------------------------
_QUOTED = re.compile(r"[“\"「『《]([^”\"」』》\n]{2,40})[”\"」』》]")
_PLACE_SUFFIXES = tuple(sorted(("购物中心", "火车站", "高铁站", "博物馆", "纪念馆", "美术馆", "展览馆", "图书馆", "体育馆", "广场", "公园",
                   "酒店", "宾馆", "饭店", "机场", "车站", "大厦", "商场", "景区", "古镇", "老街", "大学", "医院",
                   "寺", "塔", "宫", "庙", "桥", "街", "路", "城", "镇", "湖", "山", "岛", "港", "湾", "站", "店", "馆",
                   "园", "市", "区", "县"), key=len, reverse=True))
# Characters that end a name when read leftwards from its suffix (particles, pronouns,
# numerals, verbs of motion): "您入住的酒店", "下一站", "去公园" are not names.
_NOT_NAME = set("的了个这那些家您你我他她它们在到去和与及从是就都也还再先后经过往至回第一二三四五六七八九十两几每各首末上下前此其该本共约"
                "住游逛玩走开停到达离出发抵返将会可请帮为给把被对向沿")
# A one-character suffix followed by these characters is the start of a common word, not
# the end of a name: 驾车路线, 市区, 站台, 店铺, 城市 ...
_SUFFIX_CONTINUES = {"路": "线况程口段上边面径", "区": "域间内", "市": "区场内中民", "站": "点台内", "店": "铺里内面员",
                     "馆": "内", "园": "区内", "城": "市区内", "山": "路顶", "湖": "边", "港": "口", "街": "道区",
                     "镇": "上", "岛": "上", "县": "城", "桥": "下上", "宫": "殿"}
# Generic nouns that end in a suffix character but never close a name (城市道路, 高速公路).
_GENERIC = {"道路", "公路", "马路", "线路", "网站", "城市", "地区", "社区", "小区", "市区", "郊区", "山区", "街区", "园区",
            "商店", "书店", "校园"}
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")


def _place_names(text: str) -> list[str]:
    """Proper-noun-shaped Chinese names: at least two name characters before a place suffix.
    Returns the shortest checkable form (2 name characters + suffix) with the full span."""
    names = []
    for run in _CJK_RUN.finditer(text):
        s = run.group(0)
        for end in range(1, len(s) + 1):
            # the longest suffix ending here: 博物馆 rather than 馆, so "民俗博物馆" is
            # checked once and not again as "物馆"
            suffix = next((x for x in _PLACE_SUFFIXES if s.endswith(x, 0, end)), None)
            if suffix is None or (end < len(s) and s[end] in _SUFFIX_CONTINUES.get(suffix, "")):
                continue
            start = j = end - len(suffix)
            if s[max(0, start - 1):end] in _GENERIC:
                continue
            while j > 0 and s[j - 1] not in _NOT_NAME:
                j -= 1
            if start - j >= 2:
                names.append(s[start - 2:end])
    return names


def ungrounded_final_answer(text: str, history_text: str, free_numbers=FREE_NUMBERS, *,
                            facts: dict | None = None) -> list[str]:
    """Facts in a text reply that the history does not support: coordinates, ids, dates,
    numbers (also as unit conversions of tool numbers), quoted names, and Chinese place
    names (the last two name characters plus the suffix must occur in the history).
    A think block is checked like the rest: its tokens are trained on too."""
    tolerance = float(_facts_or_default(facts)["coordinate_tolerance_deg"])
    problems = _ungrounded_facts(text, history_text, "answer", True, frozenset(free_numbers), tolerance)
    low = history_text.lower()
    for name in dict.fromkeys(m.group(1).strip() for m in _QUOTED.finditer(text)):
        # Scare quotes ("fastest") are not names: only spans with a CJK character, a
        # capital or a digit are checked.
        if not re.search(r"[\u4e00-\u9fffA-Z0-9]", name):
            continue
        if name.lower() not in low:
            problems.append(f"answer: quoted name {name!r} does not appear in the history")
    for name in dict.fromkeys(_place_names(text)):
        if name not in history_text:
            problems.append(f"answer: place name ending {name!r} does not appear in the history")
    return problems


# ---- tool calls and fake tool output -------------------------------------------------------
def _schemas_by_name(tool_schemas: list[dict]) -> dict[str, dict]:
    out = {}
    for schema in tool_schemas or []:
        fn = schema.get("function", schema)
        if isinstance(fn, dict) and fn.get("name"):
            out[fn["name"]] = fn.get("parameters") or {"type": "object"}
    return out


def tool_call_problems(turn_text: str, tool_schemas: list[dict]) -> list[str]:
    """Parse errors, unknown tools and JSON-schema violations of the turn's tool calls.
    ``tool_schemas`` are OpenAI function schemas (``{"type": "function", "function": {...}}``)
    or bare ``{"name", "parameters"}`` dicts."""
    parsed = parse_tool_calls(turn_text)
    problems = [f"tool call does not parse: {parsed['parse_error']}"] if parsed["parse_error"] else []
    known = _schemas_by_name(tool_schemas)
    for call in parsed["tool_calls"]:
        name = call["name"]
        if name not in known:
            problems.append(f"unknown tool {name!r}; available: {sorted(known)}")
            continue
        schema = known[name]
        validator = jsonschema.validators.validator_for(schema)(schema)
        for err in sorted(validator.iter_errors(call["arguments"]), key=lambda e: list(e.absolute_path)):
            where = "/".join(str(p) for p in err.absolute_path) or "arguments"
            problems.append(f"invalid arguments for {name} at {where}: {err.message}")
    return problems


_FAKE_MARKERS = re.compile(
    r"</?tool_(?:response|result|output)>|<\|im_start\|>\s*tool|<\|?observation\|?>"
    r"|^[ \t>*#_-]*(?:observation|tool (?:output|response|result)|function (?:output|result)|api (?:response|result))\s*[:：]"
    r"|^[ \t>*#_-]*(?:工具返回|工具结果|工具输出|返回结果|观察结果|观察)\s*[:：]",
    re.IGNORECASE | re.MULTILINE)
@functools.lru_cache(maxsize=16)
def _key_text(strong: tuple[str, ...]) -> re.Pattern | None:
    """A quoted result key followed by a colon, for JSON too broken to parse."""
    return re.compile(r"[\"'](?:" + "|".join(map(re.escape, strong)) + r")[\"']\s*:") if strong else None


def fake_tool_output(text: str, *, facts: dict | None = None) -> list[str]:
    """Text outside tool-call blocks that is shaped like a tool result: response tags or
    role markers, "Observation:"-style lines, or a JSON object with the env's result keys
    (one of ``facts["tool_output_keys"]`` or two of ``facts["tool_output_weak_keys"]``)."""
    facts = _facts_or_default(facts)
    strong = {str(k).lower() for k in facts["tool_output_keys"]}
    weak = {str(k).lower() for k in facts["tool_output_weak_keys"]}
    prose = re.sub(re.escape(OPEN_TAG) + r".*?" + re.escape(CLOSE_TAG), " ", text, flags=re.DOTALL)
    problems = [f"text shaped like a tool result: {m.group(0).strip()!r}" for m in _FAKE_MARKERS.finditer(prose)]
    objects, _ = json_objects(prose)
    for obj in objects:
        keys = {str(k).lower() for k in obj} if isinstance(obj, dict) else set()
        if keys & strong or len(keys & weak) >= 2:
            problems.append(f"JSON shaped like a tool result with keys {sorted(keys)[:6]}")
    key_text = _key_text(tuple(sorted(strong)))
    if not objects and key_text is not None and key_text.search(prose):  # broken JSON that still quotes result keys
        problems.append(f"text shaped like a tool result: {key_text.search(prose).group(0)!r}")
    return problems


# ---- everything, for one corrected step ----------------------------------------------------
def check_corrected_step(turn_text: str, *, tool_schemas: list[dict], history_messages: list[dict],
                         is_final: bool, language: str | None = None, free_numbers=FREE_NUMBERS,
                         facts: dict | None = None) -> list[str]:
    """All V2 checks on the corrected step ``turn_text`` given the messages before it.

    ``is_final``: the step is the episode's last turn (a text answer with no continuation);
    it must then call no tool. Prose of any step is held to the final-answer grounding rule
    (a tool-call turn's prose must not state facts the history lacks either). A forbidden
    term that the user or a tool already used (a device that "提示无服务") is not a leak.
    ``facts``: the env's ``verifier_facts()``; None means the base ``ToolEnv``'s.
    """
    if not isinstance(turn_text, str) or not turn_text.strip():
        return ["the corrected step is empty"]
    history = grounding_text(history_messages)
    low = history.lower()
    problems = [f"forbidden word {h!r}" for h in _forbidden_hits(turn_text, language) if h.lower() not in low]
    problems += fake_tool_output(turn_text, facts=facts)
    parsed = parse_tool_calls(turn_text)
    if is_final and (parsed["tool_calls"] or parsed["parse_error"]):
        problems.append("a corrected final answer must not call tools")
    problems += tool_call_problems(turn_text, tool_schemas)
    problems += ungrounded_arguments(parsed["tool_calls"], history, free_numbers, facts=facts)
    if parsed["content"]:
        problems += ungrounded_final_answer(parsed["content"], history, free_numbers, facts=facts)
    return problems


__all__ = ["FREE_NUMBERS", "check_corrected_step", "fake_tool_output", "forbidden_words", "tool_call_problems",
           "ungrounded_arguments", "ungrounded_final_answer"]
