// The element with `id`, typed as the caller expects it (the page's template renders it; see
// webapp/page_data.py for the data it embeds). One helper for every page script.
export function $<T extends HTMLElement = HTMLElement>(id: string): T {
  return document.getElementById(id) as T;
}
