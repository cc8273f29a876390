"""One page of a list on a page that shows several lists: each list has its own page parameter, and the
links to a list's neighbouring pages keep the other lists' pages (and every other parameter) as they were."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import QueryDict

LIST_PAGE_SIZE = 25


@dataclass(frozen=True)
class ListPage:
    page: Page
    newer_url: str  # "" on the first page
    older_url: str  # "" on the last page
    anchor: str  # the list's element id, where its links land

    def __iter__(self) -> Iterator[Any]:
        return iter(self.page)

    def __len__(self) -> int:
        return len(self.page)


def list_page(
    query: QueryDict, items: QuerySet[Any] | Sequence[Any], *, param: str, anchor: str, size: int = LIST_PAGE_SIZE
) -> ListPage:
    page = Paginator(items, size).get_page(query.get(param))

    def url(number: int) -> str:
        params = query.copy()
        params[param] = str(number)
        return f"?{params.urlencode()}#{anchor}"

    return ListPage(
        page=page,
        newer_url=url(page.previous_page_number()) if page.has_previous() else "",
        older_url=url(page.next_page_number()) if page.has_next() else "",
        anchor=anchor,
    )
