// The episode's change history (who changed which labels when), loaded when its panel opens.
import { api } from "../../lib/api";

interface Change {
  id: number;
  at: string;
  who: string;
  kind: string;
  action: string;
  source: string;
  start: number;
  end: number;
  old_value: string;
  new_value: string;
}

/** Changes per page; the API's default. */
export const HISTORY_PAGE = 200;

function row(c: Change): HTMLTableRowElement {
  const tr = document.createElement("tr");
  const cells = [
    new Date(c.at).toLocaleString(),
    c.who,
    `${c.kind} ${c.action}${c.source === "human" ? "" : ` (${c.source})`}`,
    c.start === c.end ? String(c.start) : `${c.start}–${c.end}`,
    `${c.old_value || "—"} → ${c.new_value || "—"}`,
  ];
  for (const text of cells) {
    const td = document.createElement("td");
    td.textContent = text;
    tr.append(td);
  }
  return tr;
}

/** The newest page of changes; `more` (a button) then loads the next older page, and hides when none is left. */
export async function historyShow(episodeApi: string, body: HTMLElement, more?: HTMLButtonElement): Promise<void> {
  const rows = await api<Change[]>(`${episodeApi}/history?limit=${HISTORY_PAGE}`);
  body.replaceChildren(...rows.map(row));
  if (!more) return;
  let last = rows.at(-1)?.id;
  more.hidden = rows.length < HISTORY_PAGE;
  more.onclick = async () => {
    more.disabled = true;
    const older = await api<Change[]>(`${episodeApi}/history?limit=${HISTORY_PAGE}&before=${last}`);
    body.append(...older.map(row));
    last = older.at(-1)?.id ?? last;
    more.hidden = older.length < HISTORY_PAGE;
    more.disabled = false;
    more.blur();
  };
}
