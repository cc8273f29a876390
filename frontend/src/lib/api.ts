// Small fetch wrapper for the REST API: JSON in and out, the CSRF token from the cookie, and errors
// that carry the server's `detail` message.
import type { PageData } from "../generated/page-data";

export class ApiError extends Error {
  constructor(public status: number, message: string, public body: unknown = null) {
    super(message);
  }
}

function csrfToken(): string {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

export async function api<T = unknown>(path: string, init: RequestInit & { json?: unknown } = {}): Promise<T> {
  const headers = new Headers(init.headers);
  let body = init.body;
  if (init.json !== undefined) {
    headers.set("Content-Type", "application/json");
    body = JSON.stringify(init.json);
  }
  if (init.method && init.method !== "GET") headers.set("X-CSRFToken", csrfToken());
  const response = await fetch(path, { ...init, headers, body, credentials: "same-origin" });
  if (response.status === 204) return undefined as T;
  const data = response.headers.get("content-type")?.includes("json") ? await response.json() : await response.text();
  if (!response.ok) {
    const detail = typeof data === "object" && data && "detail" in data ? String((data as { detail: unknown }).detail) : String(data);
    throw new ApiError(response.status, detail || response.statusText, data);
  }
  return data as T;
}

/**
 * Reads the JSON that a Django template embedded with json_script, typed as the named page's data
 * (generated/page-data.ts, generated from webapp/page_data.py: the server checks the same description).
 */
export function pageData<Page extends keyof PageData>(page: Page, id = "page-data"): PageData[Page] {
  const element = document.getElementById(id);
  if (!element?.textContent) throw new Error(`missing #${id} (the data of the ${page} page)`);
  return JSON.parse(element.textContent) as PageData[Page];
}
