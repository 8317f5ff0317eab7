"""Content services: rss, web (fixture search and fetch, no network), ocr (fixture text),
documents (PDF text from the task's folder) (see ``services`` for the rules)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envs.base import InfrastructureError
from envs.claw_eval.mock import HTTPError, MockService, missing, route
from envs.claw_eval.services_business import summary
from envs.claw_eval.services_office import find

# ---- rss --------------------------------------------------------------------------------------


class ListFeeds(BaseModel):
    category: str | None = None


class ListArticles(BaseModel):
    source: str | None = None
    category: str | None = None
    max_results: int = 20


class ArticleId(BaseModel):
    article_id: str


class FeedId(BaseModel):
    feed_id: str


class Publish(BaseModel):
    title: str
    content: str
    recipients: list[str] = Field(default_factory=list)


class RSSService(MockService):
    module = "rss"
    fixture_var = "RSS_FIXTURES"
    SUMMARY_KEYS = ("article_id", "title", "source", "category", "published_at", "summary", "word_count")

    def load(self, data: Any) -> None:
        self.articles: list[dict] = list(data or [])
        self.published: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"published": self.published}

    @route("/rss/feeds", ListFeeds)
    def list_feeds(self, req: ListFeeds) -> dict:
        # feeds are derived from the articles; upstream lists a feed's categories from a
        # set (an order that varies per process), here in first-seen order
        feeds: dict[str, dict] = {}
        for a in self.articles:
            if req.category and a["category"] != req.category:
                continue
            feed = feeds.setdefault(a["source"], {"source": a["source"], "categories": [], "article_count": 0})
            if a["category"] not in feed["categories"]:
                feed["categories"].append(a["category"])
            feed["article_count"] += 1
        return {"feeds": list(feeds.values()), "total": len(feeds)}

    @route("/rss/feeds/get", FeedId, fix="missing_routes")
    def get_feed(self, req: FeedId) -> dict:
        # upstream's tasks expose rss_get_feed on this path, which its server lacks; a
        # feed is an article source, as in list_feeds
        found = [summary(a, self.SUMMARY_KEYS) for a in self.articles if a["source"] == req.feed_id]
        if not found:
            return missing("Feed", req.feed_id)
        return {"feed_id": req.feed_id, "articles": found, "total": len(found)}

    @route("/rss/articles", ListArticles)
    def list_articles(self, req: ListArticles) -> dict:
        found = [summary(a, self.SUMMARY_KEYS) for a in self.articles
                 if not (req.source and a["source"] != req.source)
                 and not (req.category and a["category"] != req.category)][:req.max_results]
        return {"articles": found, "total": len(found)}

    @route("/rss/articles/get", ArticleId)
    def get_article(self, req: ArticleId) -> dict:
        match = find(self.articles, "article_id", req.article_id)
        return copy.deepcopy(match) if match else missing("Article", req.article_id)

    @route("/rss/publish", Publish)
    def publish(self, req: Publish) -> dict:
        record = req.model_dump()
        self.published.append(record)
        return {"status": "published", "record": copy.deepcopy(record)}


# ---- web --------------------------------------------------------------------------------------

class WebSearch(BaseModel):
    query: str
    max_results: int = 10


class WebFetch(BaseModel):
    url: str
    timeout_seconds: int = 30


class WebNotify(BaseModel):
    channel: str
    message: str
    recipients: list[str] = Field(default_factory=list)


_PUNCTUATION = ",.!?;:\"'()[]{}\u3002\uff0c\uff01\uff1f\uff1b\uff1a\u201c\u201d\u2018\u2019\uff08\uff09\u3010\u3011\u300a\u300b"


def _cjk(char: str) -> bool:
    return "\u4e00" <= char <= "\u9fff"


def web_terms(text: str) -> set[str]:
    """The web search's match terms: lower-cased words with surrounding punctuation cut,
    single CJK characters, and pairs of adjacent CJK characters."""
    terms = {w.strip(_PUNCTUATION) for w in text.lower().split()} - {""}
    terms.update(c for c in text if _cjk(c))
    terms.update(a + b for a, b in zip(text, text[1:]) if _cjk(a) and _cjk(b))
    return terms


class WebService(MockService):
    """Search answers from a list of results tagged with keywords, ranked by how many
    terms a result's keywords share with the query (ties in fixture order); fetch
    answers from pages keyed by exact URL. Neither touches the network."""

    module = "web"
    fixture_var = "WEB_SEARCH_FIXTURES"

    def load(self, data: Any) -> None:
        self.results: list[dict] = list(data or [])
        pages = self.paths.get("WEB_FETCH_FIXTURES")
        self.pages: list[dict] = list(self.read(pages) or []) if pages else []
        self.notifications: list[dict] = []

    def actions(self) -> dict[str, list]:
        return {"notifications": self.notifications}

    @route("/web/search", WebSearch)
    def search(self, req: WebSearch) -> dict:
        wanted = web_terms(req.query)
        ranked = []
        for index, item in enumerate(self.results):
            terms = set().union(*(web_terms(k) for k in item.get("keywords", [])))
            if overlap := len(wanted & terms):
                ranked.append((-overlap, index, item))
        ranked.sort(key=lambda r: r[:2])
        found = [{"url": i["url"], "title": i["title"], "snippet": i["snippet"], "source": i.get("source", ""),
                  "published_at": i.get("published_at", "")} for _, _, i in ranked[:req.max_results]]
        return {"results": found, "total": len(found), "query": req.query}

    @route("/web/fetch", WebFetch)
    def fetch(self, req: WebFetch) -> dict:
        # a page's own error status and a missing page are both 200s carrying status_code
        page = next((p for p in self.pages if p["url"] == req.url), None)
        if page is None:
            return {"status_code": 404, "url": req.url, "error": "Page not found or unavailable", "content": None}
        code = page.get("status_code", 200)
        if code >= 400:
            return {"status_code": code, "url": req.url, "error": page.get("error", f"HTTP {code}"), "content": None}
        return {"status_code": code, "url": req.url, "title": page.get("title", ""),
                "content": page.get("content", ""), "content_type": page.get("content_type", "text/html"),
                "fetched_at": self.clock.iso()}

    @route("/web/notify", WebNotify)
    def notify(self, req: WebNotify) -> dict:
        record = req.model_dump()
        self.notifications.append(record)
        return {"status": "sent", "record": copy.deepcopy(record)}


# ---- ocr --------------------------------------------------------------------------------------

class OCRExtract(BaseModel):
    image_path: str = ""


#: the text upstream's OCR server falls back to when the task names none it can find
OCR_DEFAULT_TEXT = "tasks/T072_restaurant_menu_contact/fixtures/ocr/menu_ocr.txt"
OCR_DEFAULT_FILENAME = "menu_ocr.txt"


class OCRService(MockService):
    """Answers every extraction with the task's fixture text, whatever image is named.
    ``OCR_FIXTURES`` is a folder; the text is ``<folder>/ocr/<OCR_FILENAME>``, or with
    ``OCR_FILENAMES`` (comma-separated) the files found, each under a numbered header."""

    module = "ocr"
    fixture_var = "OCR_FIXTURES"

    def read(self, fixture_path: Path | None) -> Any:
        if fixture_path is not None:
            folder = fixture_path / "ocr"
            names = [n.strip() for n in self.env.get("OCR_FILENAMES", "").split(",")] \
                if self.env.get("OCR_FILENAMES") else []
            parts = [f"--- Document {i}: {name} ---\n" + (folder / name).read_text(encoding="utf-8")
                     for i, name in enumerate(names, 1) if (folder / name).is_file()]
            if parts:
                return "\n\n".join(parts)
            single = folder / self.env.get("OCR_FILENAME", OCR_DEFAULT_FILENAME)
            if single.is_file():
                return single.read_text(encoding="utf-8")
        default = self.data_dir / OCR_DEFAULT_TEXT if self.data_dir else None
        return default.read_text(encoding="utf-8") if default and default.is_file() else ""

    def load(self, data: Any) -> None:
        self.text: str = data or ""

    def log_entry(self, path: str, request: Any, response: Any) -> dict:
        return {"endpoint": path, "request_body": request}  # upstream logs no response or time here

    @route("/ocr/extract", OCRExtract)
    def extract(self, req: OCRExtract) -> dict:
        return {"text": self.text, "confidence": 0.95, "language": "mixed"}


# ---- documents --------------------------------------------------------------------------------

class ExtractText(BaseModel):
    path: str
    max_pages: int | None = None


class DocumentsService(MockService):
    """PDF text from files under ``DOCUMENTS_BASE_DIR`` (relative to the copy's root).
    A missing file is a 404 and a path outside the folder or a non-PDF a 400, both as
    ``{"detail": ...}`` answers; the audit records the text's length, not the text."""

    module = "documents"
    fixture_var = ""

    def load(self, data: Any) -> None:
        root = self.data_dir or Path.cwd()
        self.base = (root / self.env.get("DOCUMENTS_BASE_DIR", "")).resolve()

    def _resolve(self, raw: str) -> Path:
        candidate = Path(raw)
        resolved = (candidate if candidate.is_absolute() else self.base / candidate).resolve()
        if not resolved.exists():
            raise HTTPError(404, f"File not found: {raw}")
        if not resolved.is_relative_to(self.base):
            raise HTTPError(400, f"Path escapes base directory: {raw}")
        return resolved

    def log_entry(self, path: str, request: Any, response: Any) -> dict:
        shown = {k: response[k] for k in ("path", "page_count", "pages_returned")}
        shown["text_length"] = len(response["text"])
        return {"endpoint": path, "request_body": request, "response_body": shown, "timestamp": self.clock.iso()}

    @route("/documents/extract_text", ExtractText)
    def extract_text(self, req: ExtractText) -> dict:
        resolved = self._resolve(req.path)
        if resolved.suffix.lower() != ".pdf":
            raise HTTPError(400, "Only PDF files are supported")
        try:
            from pypdf import PdfReader
        except ImportError as exc:  # the host lacks a library: not the agent's error
            raise InfrastructureError("the documents service needs pypdf (pip install pypdf)") from exc
        reader = PdfReader(str(resolved))
        limit = min(req.max_pages or len(reader.pages), len(reader.pages))
        text = "\n\n".join(page.extract_text() or "" for page in reader.pages[:limit]).strip()
        return {"path": str(resolved.relative_to(self.base)), "page_count": len(reader.pages),
                "pages_returned": limit, "text": text}
