"""The system prompt and the worked example, in English (default) and Chinese."""

from __future__ import annotations

LANGUAGES = ("en", "zh")

SYSTEM_PROMPTS = {
    "en": ("You are an office assistant working through tools on the user's services ({services}). Today is {today}. "
           "Look records up before acting and read them carefully; follow the request and any policy it points to "
           "exactly. Change only what you are asked to change: never send, delete, close, export or share unless the "
           "request says so. Tool errors such as rate limits or timeouts are temporary: retry the call. When you are "
           "done, reply in plain text without a tool call, summarising what you did and naming the records involved; "
           "that ends the task."),
    "zh": ("你是一名办公助理，通过工具操作用户的各项服务（{services}）。今天是{today}。先查记录再行动，仔细阅读内容，"
           "严格按照请求及其提到的规则办事。只做被要求的改动：除非请求明确要求，否则不要发送、删除、关闭、导出或共享。"
           "限流、超时等工具错误是暂时的，请重试。完成后直接用文字回复（不调用工具），总结你做了什么并写出涉及的记录，"
           "任务即结束。"),
}

# One worked example per service, on records that exist in no task: the renderer shows
# small models the call syntax on the service the task starts from.
_DEMO = {
    "mail": ("Show me my unread mail.", "看看我的未读邮件。", "mail_list", {"folder": "inbox", "unread_only": True}),
    "calendar": ("What is on my calendar on 2025-01-06?", "我2025-01-06有什么安排？", "calendar_list", {"date": "2025-01-06"}),
    "contacts": ("Find the contact details of Sam Example.", "查一下Sam Example的联系方式。", "contacts_search",
                 {"query": "Sam Example"}),
    "crm": ("Which customers are in the APAC region?", "亚太区有哪些客户？", "crm_list", {"region": "APAC"}),
    "finance": ("List the transactions of 2025-01-06.", "列出2025-01-06的交易。", "finance_transactions",
                {"start_date": "2025-01-06", "end_date": "2025-01-06"}),
    "helpdesk": ("Which tickets are open?", "有哪些未处理的工单？", "helpdesk_list", {"status": "open"}),
    "inventory": ("What do we stock in the category cables?", "线缆类有哪些库存？", "inventory_products", {"category": "cables"}),
    "kb": ("Is there a KB article about VPN setup?", "知识库里有VPN设置的文章吗？", "kb_search", {"query": "VPN setup"}),
    "notes": ("What notes do I have?", "我有哪些笔记？", "notes_list", {}),
    "scheduler": ("Which scheduled jobs failed?", "哪些定时任务失败了？", "scheduler_list", {"status": "failed"}),
    "todo": ("Show my todo list.", "看看我的待办。", "todo_list", {}),
    "config": ("Which integrations are configured?", "配置了哪些集成？", "config_integrations", {}),
}


def demonstration(service: str, language: str) -> list[dict]:
    en, zh, tool, args = _DEMO[service]
    return [{"role": "user", "content": en if language == "en" else zh},
            {"role": "assistant", "content": "", "tool_calls": [{"name": tool, "arguments": dict(args)}]}]


def system_prompt(language: str, services: list[str], today: str) -> str:
    return SYSTEM_PROMPTS[language].format(services=", ".join(services), today=today)
