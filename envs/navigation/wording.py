"""The user's request and the system prompt, in colloquial Chinese (default) or English.

Place names are always the map's Chinese names, exactly as the POI is called, also in
English requests: the map answers in Chinese, and an agent must search for the name it was
given. The wording of a task is a pure function of (task, language): templates are picked
by a random stream seeded with the task id.
"""

from __future__ import annotations

import random

from envs.navigation.tasks import NavTask

LANGUAGES = ("zh", "en")

SYSTEM_PROMPTS = {
    "zh": ("你是一个出行规划助手，可以调用高德地图工具：poi_search（地点搜索）、around_search（周边搜索）、"
           "direction（路线规划）和 weather（天气）。先用工具查清每个地点的准确坐标（坐标格式为\"经度,纬度\"），"
           "同名或名字相近的地点很多，请核对名称和所在城市。然后调用 direction 规划一条驾车路线"
           "（mode=driving，途经点按到访顺序写在 waypoints 里，用分号分隔）。规划完成后，"
           "直接用文字回复用户（不再调用工具），对话即结束。"),
    "en": ("You are a trip-planning assistant with Amap map tools: poi_search (place search), around_search "
           "(search around a point), direction (route planning) and weather. First use the tools to find the exact "
           "coordinates of every place (written \"longitude,latitude\"); many places share or nearly share a name, "
           "so check the name and the city. Then call direction once to plan a driving route (mode=driving, the "
           "stops in visiting order in waypoints, separated by semicolons). When the route is planned, reply to the "
           "user in plain text without a tool call; that ends the conversation."),
}

_ZH = {
    "open": ["我在{city}，", "这周末在{city}玩，", "人在{city}，", "明天在{city}自驾一天，", "最近来{city}出差，抽一天出去转转，"],
    "origin": ["从{o}出发，", "早上从{o}出发，", "我住{o}，从那儿出发，", "起点是{o}，"],
    "list": ["想去{vias}这几个地方，", "打算逛逛{vias}，", "想顺路去一下{vias}，", "中间想去{vias}，"],
    "seq": ["中间依次去{vias}，", "路上按顺序经过{vias}，"],
    "dest": ["最后到{d}。", "晚上要到{d}。", "最后去{d}。", "终点是{d}。"],
    0: ["这几个地方先去哪后去哪都行，你看着安排。", "顺序无所谓，你帮我排。", "中间几个地方的顺序随意。"],
    "first": ["第一站一定要先去{x}，其他的顺序随便。", "先去{x}，剩下的你看着排。"],
    "last": ["{x}放到最后一站再去，其他的无所谓。", "{x}留到最后去，别的顺序随意。"],
    3: ["不过{x}和{y}谁先谁后都行。", "其中{x}和{y}的先后无所谓。"],
    4: ["顺序不能乱。", "一定按这个顺序走。"],
    "close": ["帮我规划一下开车路线。", "帮我用高德规划条驾车路线吧。", "麻烦规划一下自驾路线，谢谢！"],
}

_EN = {
    "open": ["I'm in {city} ({city_zh}) this weekend. ", "I'm visiting {city} ({city_zh}) and will drive around tomorrow. ",
             "I have a free day in {city} ({city_zh}). "],
    "origin": ["Starting from {o}, ", "I'm staying at {o} and will leave from there; ", "My starting point is {o}; "],
    "list": ["I'd like to visit {vias}, ", "on the way I want to see {vias}, "],
    "seq": ["on the way I'll visit {vias} in this order, ", "I want to stop at {vias}, in that order, "],
    "dest": ["and end at {d}. ", "and finish at {d}. "],
    0: ["Any order of the stops is fine, you decide. ", "The order doesn't matter to me. "],
    "first": ["{x} has to be the first stop; the rest in any order. ", "Go to {x} first; order the others as you like. "],
    "last": ["Leave {x} for the last stop; the others in any order. ", "{x} should be the final stop before the end; the rest can be in any order. "],
    3: ["Only {x} and {y} may be swapped. ", "{x} and {y} can come in either order. "],
    4: ["Please keep exactly that order. ", "The order matters, please stick to it. "],
    "close": ["Please plan a driving route.", "Can you plan the drive for me?"],
}


def _join(names: list[str], language: str) -> str:
    if language == "zh":
        return "、".join(names[:-1]) + "和" + names[-1] if len(names) > 1 else names[0]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def _block(names: list[str], language: str, first: bool) -> str:
    """One block of a level-2 request."""
    text = _join(names, language)
    if language == "zh":
        if len(names) == 1:
            return f"先去{text}，" if first else f"再去{text}。"
        return f"先把{text}逛了（这几个顺序随意），" if first else f"再去{text}（顺序也随意）。"
    if len(names) == 1:
        return f"First {text}, " if first else f"then {text}. "
    return f"First {text} (in any order), " if first else f"then {text} (in any order). "


def request_text(task: NavTask, language: str) -> str:
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}; valid languages: {list(LANGUAGES)}")
    if task.requests is not None:  # an annotated task brings its own words
        if language not in task.requests:
            raise ValueError(f"task {task.task_id!r} has no {language!r} request; it has {sorted(task.requests)}")
        return task.requests[language]
    rng = random.Random(f"navigation-wording:{task.task_id}:{language}")
    t = _ZH if language == "zh" else _EN
    pick = lambda key, **kw: rng.choice(t[key]).format(**kw)  # noqa: E731
    city = task.origin.city
    names = [p.name for p in task.waypoints]
    parts = [pick("open", city=city.short if language == "zh" else city.english, city_zh=city.name),
             pick("origin", o=task.origin.name)]
    if task.level >= 3:  # the listing itself is the order
        parts.append(pick("seq", vias=_join(names, language)))
    else:
        listing = names[:]
        rng.shuffle(listing)  # the order of mention carries no information below level 3
        parts.append(pick("list", vias=_join(listing, language)))
    parts.append(pick("dest", d=task.destination.name))
    if task.level == 0:
        parts.append(pick(0))
    elif task.level == 1:
        pinned = names[0] if task.pinned == "first" else names[-1]
        parts.append(pick(task.pinned, x=pinned))
    elif task.level == 2:
        first, second = task.groups
        parts.append(_block([names[i] for i in first], language, True) + _block([names[i] for i in second], language, False))
    elif task.level == 3:
        pair = next(g for g in task.groups if len(g) == 2)
        parts.append(pick(3, x=names[pair[0]], y=names[pair[1]]))
    else:
        parts.append(pick(4))
    parts.append(pick("close"))
    return "".join(parts).strip()

# A worked example shown to small models before the task (see envs.base.Task): one search
# with a city qualifier, on a place that is not part of any task.
DEMONSTRATIONS = {
    "zh": [{"role": "user", "content": "帮我查一下北京天安门的坐标。"},
           {"role": "assistant", "content": "",
            "tool_calls": [{"name": "poi_search", "arguments": {"address": "天安门", "region": "北京"}}]}],
    "en": [{"role": "user", "content": "Find the coordinates of Tiananmen in Beijing."},
           {"role": "assistant", "content": "",
            "tool_calls": [{"name": "poi_search", "arguments": {"address": "天安门", "region": "北京"}}]}],
}
