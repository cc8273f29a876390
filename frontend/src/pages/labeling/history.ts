// The episode's change history (who changed which labels when), loaded when its panel opens.
import { api } from "../../lib/api";

interface Change {
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

export async function historyShow(episodeApi: string, body: HTMLElement): Promise<void> {
  const rows = await api<Change[]>(`${episodeApi}/history`);
  body.replaceChildren(
    ...rows.map((c) => {
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
    }),
  );
}
