// Concurrent edits. Every write names the value it was based on (what this page showed). When someone else
// changed a label meanwhile the server saves nothing and answers 409 with their value; the panel below shows
// both and the person picks. An undo is based on the value it undoes, so it never reverts another person's change.
import { ApiError } from "../../lib/api";

export interface Conflict {
  start: number;
  end: number;
  base: string | null;
  current: string | null;
  by: string;
}

export function conflictsOf(error: unknown): Conflict[] | null {
  if (!(error instanceof ApiError) || error.status !== 409) return null;
  const body = error.body as { conflicts?: Conflict[] } | null;
  return body?.conflicts ?? null;
}

export const shown = (value: string | null) => value ?? "no label";

/** One conflict at a time: "Keep mine" or "Take theirs", then `resolved` (the labels changed). */
export class ConflictPanel {
  private readonly panel = document.createElement("div");
  private readonly pending: { text: string; mine: () => void; theirs: () => void }[] = [];

  constructor(private readonly resolved: () => void) {
    this.panel.id = "conflict";
    this.panel.className = "conflict-panel";
    this.panel.setAttribute("role", "alertdialog");
    this.panel.hidden = true;
    document.body.append(this.panel);
  }

  show(text: string, mine: () => void, theirs: () => void): void {
    this.pending.push({ text, mine, theirs });
    this.render();
  }

  private render(): void {
    const next = this.pending[0];
    this.panel.hidden = !next;
    if (!next) return;
    this.panel.replaceChildren();
    const title = document.createElement("strong");
    title.textContent = "Someone else changed these labels while you were editing";
    const body = document.createElement("p");
    body.className = "conflict-text";
    body.textContent = next.text;
    const mine = document.createElement("button");
    mine.dataset.choice = "mine";
    mine.textContent = "Keep mine";
    const theirs = document.createElement("button");
    theirs.dataset.choice = "theirs";
    theirs.textContent = "Take theirs";
    const choose = (pick: () => void) => () => {
      this.pending.shift();
      pick();
      this.render();
      this.resolved();
    };
    mine.addEventListener("click", choose(next.mine));
    theirs.addEventListener("click", choose(next.theirs));
    this.panel.append(title, body, mine, theirs);
  }
}
