// Label writes: every change is shown at once and saved in order (a serial queue); frame writes are buffered
// for a moment and sent as ranges; undo and redo write the inverse; 409 answers go to the conflict panel;
// a failed save says so and reloads the labels once the server answers again.
import type { EpisodeLabelingData } from "../../generated/page-data";
import { api } from "../../lib/api";
import { SerialQueue, UndoStack } from "../../lib/undo";
import { type Conflict, ConflictPanel, conflictsOf, shown } from "./conflicts";
import type { Renderer } from "./render";
import type { LabelingState, WindowValue } from "./state";

type Edit = [position: number, value: string | null, base: string | null];
type WindowEdit = [start: number, end: number, value: string | null, base: string | null];
type Init = RequestInit & { json?: unknown };

export class Writer {
  readonly queue: SerialQueue;
  readonly undo = new UndoStack();
  private readonly conflicts: ConflictPanel;
  // Local edits, numbered, so a reload that raced with newer edits keeps them on screen (they are on their way).
  private localSeq = 0;
  private readonly frameWrites = new Map<number, [number, string | null]>();
  private readonly windowWrites = new Map<string, [number, number, number, string | null]>();
  // Frame writes wait here for a moment and go out as ranges (a held key labels many frames).
  private readonly frameBuffer = new Map<number, [value: string | null, base: string | null]>();
  private flushTimer = 0;

  constructor(
    private readonly s: LabelingState,
    private readonly r: Renderer,
    private readonly saveStatus: HTMLElement,
    /** Moves the cursor (auto-advance after a window label). */
    private readonly advance: (to: number) => void,
  ) {
    // Frame edits still waiting in the buffer count as unsaved: "Saved" only once they have gone out too.
    this.queue = new SerialQueue((busy) => this.showBusy(busy || this.frameBuffer.size > 0));
    saveStatus.dataset.state = "idle";
    this.conflicts = new ConflictPanel(() => r.labelsChanged());
  }

  private showBusy(busy: boolean): void {
    const saveStatus = this.saveStatus;
    if (saveStatus.dataset.state === "error") return;
    saveStatus.dataset.state = busy ? "busy" : "idle";
    saveStatus.textContent = busy ? "Saving…" : "Saved";
  }

  readonly failed = (error: unknown): void => {
    const { saveStatus, queue } = this;
    saveStatus.dataset.state = "error";
    saveStatus.textContent = `Not saved: ${error instanceof Error ? error.message : String(error)}`;
    // Resync with the server (the label that was not saved disappears). The message stays until a save
    // succeeds (send() clears it): a quick resync must not replace it with "Saved" before anyone reads it.
    queue.run(this.reload).catch(() => undefined);
  };

  send<T>(path: string, init: Init, onConflict?: (conflicts: Conflict[]) => void): Promise<T | undefined> {
    const saveStatus = this.saveStatus;
    return this.queue.run(() => api<T>(path, init)).then(
      (result) => {
        if (saveStatus.dataset.state === "error") {
          // saving works again: the idle callback will say "Saved" once the queue drains
          saveStatus.dataset.state = "busy";
          saveStatus.textContent = "Saving…";
        }
        return result;
      },
      (error) => {
        const conflicts = conflictsOf(error);
        if (conflicts && onConflict) onConflict(conflicts);
        else this.failed(error);
        return undefined;
      },
    );
  }

  /** The labels from the server, with this page's edits that are still on their way on top. */
  readonly reload = async (): Promise<void> => {
    const since = this.localSeq;
    const fresh = await api<EpisodeLabelingData>(`${this.s.episodeApi}/labeling`);
    this.s.loadLabels(fresh);
    const human = this.s.model.human;
    for (const [p, [seq, value]] of this.frameWrites) {
      if (seq > since || this.frameBuffer.has(p)) human[p] = value; // newer, or not sent yet
      else this.frameWrites.delete(p);
    }
    for (const [key, [seq, start, end, value]] of this.windowWrites) {
      if (seq > since) this.s.applyWindow(start, end, value);
      else this.windowWrites.delete(key);
    }
    this.r.labelsChanged();
  };

  /** Reloads after the writes before it (used after proposal decisions). */
  reloadQueued(): Promise<void> {
    return this.queue.run(this.reload).catch(this.failed);
  }

  // ---- frames ------------------------------------------------------------------------------------------

  /** Sets `value` on the positions that differ; records one undo entry unless `record` is false. */
  labelFrames(positions: number[], value: string | null, record = true): [number, string | null][] {
    const human = this.s.model.human;
    const olds = positions.filter((p) => human[p] !== value).map((p) => [p, human[p]] as [number, string | null]);
    if (!olds.length) return olds;
    this.writeFrames(
      olds.map(([p, old]) => [p, value, old]),
      this.s.view.held ? 150 : 0,
    );
    if (record) this.recordFrames(`${value ?? "clear"} ×${olds.length}`, olds, value);
    return olds;
  }

  /** Undo puts back the old values based on the new one; redo the reverse: neither overwrites someone else. */
  recordFrames(label: string, olds: [number, string | null][], value: string | null): void {
    this.undo.push({
      label,
      undo: () => this.writeFrames(olds.map(([p, old]) => [p, old, value])),
      redo: () => this.writeFrames(olds.map(([p, old]) => [p, value, old])),
    });
  }

  readonly flushFrames = (keepalive = false): void => {
    window.clearTimeout(this.flushTimer);
    this.flushTimer = 0;
    if (!this.frameBuffer.size) return;
    const edits = [...this.frameBuffer.entries()].sort((a, b) => a[0] - b[0]).map(([p, [v, b]]) => [p, v, b] as Edit);
    this.frameBuffer.clear();
    this.sendFrames(edits, keepalive);
  };

  private writeFrames(items: Edit[], delay = 0): void {
    for (const [p, value, base] of items) {
      this.s.model.human[p] = value;
      // a frame changed twice before sending keeps the base of its first change
      this.frameBuffer.set(p, [value, this.frameBuffer.get(p)?.[1] ?? base]);
      this.frameWrites.set(p, [++this.localSeq, value]);
    }
    this.r.labelsChanged();
    this.showBusy(true);
    window.clearTimeout(this.flushTimer);
    this.flushTimer = window.setTimeout(this.flushFrames, delay);
  }

  private sendFrames(edits: Edit[], keepalive = false): void {
    const indexOf = this.s.indexOf;
    const first = edits[0];
    const last = edits[edits.length - 1];
    const oneRange =
      last[0] - first[0] === edits.length - 1 && edits.every(([, v, b]) => v === first[1] && b === first[2]);
    const json = oneRange
      ? { start: indexOf[first[0]], end: indexOf[last[0]], value: first[1], base: first[2] }
      : { items: edits.map(([p, value, base]) => ({ index: indexOf[p], value, base })) };
    this.send(`${this.s.episodeApi}/frame-labels`, { method: "PUT", json, keepalive }, (c) => this.frameConflict(edits, c));
  }

  private frameConflict(sent: Edit[], conflicts: Conflict[]): void {
    const indexOf = this.s.indexOf;
    const byIndex = new Map(conflicts.map((c) => [c.start, c]));
    const clash = sent.filter(([p]) => byIndex.has(indexOf[p]));
    const rest = sent.filter(([p]) => !byIndex.has(indexOf[p]));
    if (rest.length) this.sendFrames(rest); // not saved either (all or nothing): their bases still hold
    const text = clash
      .map(([p, value]) => {
        const c = byIndex.get(indexOf[p])!;
        return `Step ${indexOf[p]}: ${c.by || "someone"} set ${shown(c.current)}; you set ${shown(value)}.`;
      })
      .join(" ");
    this.conflicts.show(
      text,
      () => this.sendFrames(clash.map(([p, value]) => [p, value, byIndex.get(indexOf[p])!.current])),
      () => {
        for (const [p] of clash) {
          this.s.model.human[p] = byIndex.get(indexOf[p])!.current;
          this.frameWrites.delete(p);
        }
      },
    );
  }

  // ---- windows -----------------------------------------------------------------------------------------

  /** Labels (or, with null, deletes) the human label of the window at the cursor. */
  labelWindow(value: WindowValue | null): void {
    const span = this.s.windowSpan();
    if (!span) return;
    const old = this.s.humanWindow(span[0], span[1])?.value ?? null;
    if (old === value) return;
    this.writeWindows([[span[0], span[1], value, old]]);
    this.undo.push({
      label: `window ${value ?? "delete"}`,
      undo: () => this.writeWindows([[span[0], span[1], old, value]]),
      redo: () => this.writeWindows([[span[0], span[1], value, old]]),
    });
    if (this.s.view.autoAdvance && value !== null) this.advance(this.s.view.cursor + this.s.stride);
  }

  private writeWindows(items: WindowEdit[]): void {
    for (const [start, end, value] of items) {
      this.s.applyWindow(start, end, value);
      this.windowWrites.set(`${start}-${end}`, [++this.localSeq, start, end, value]);
    }
    this.r.labelsChanged();
    this.flushFrames();
    this.sendWindows(items);
  }

  private sendWindows(edits: WindowEdit[]): void {
    const indexOf = this.s.indexOf;
    const json = { items: edits.map(([s, e, value, base]) => ({ start: indexOf[s], end: indexOf[e], value, base })) };
    this.send(`${this.s.episodeApi}/window-labels`, { method: "POST", json }, (c) => this.windowConflict(edits, c));
  }

  private windowConflict(sent: WindowEdit[], conflicts: Conflict[]): void {
    const indexOf = this.s.indexOf;
    const key = (start: number, end: number) => `${start}-${end}`;
    const bySpan = new Map(conflicts.map((c) => [key(c.start, c.end), c]));
    const find = ([s, e]: WindowEdit) => bySpan.get(key(indexOf[s], indexOf[e]));
    const clash = sent.filter((w) => find(w));
    const rest = sent.filter((w) => !find(w));
    if (rest.length) this.sendWindows(rest);
    const text = clash
      .map((w) => {
        const c = find(w)!;
        return `Window ${c.start}–${c.end}: ${c.by || "someone"} set ${shown(c.current)}; you set ${shown(w[2])}.`;
      })
      .join(" ");
    this.conflicts.show(
      text,
      () => this.sendWindows(clash.map((w) => [w[0], w[1], w[2], find(w)!.current])),
      () => {
        for (const w of clash) {
          this.s.applyWindow(w[0], w[1], find(w)!.current);
          this.windowWrites.delete(key(w[0], w[1]));
        }
      },
    );
  }

  // ---- undo --------------------------------------------------------------------------------------------

  async undoOrRedo(redo = false): Promise<void> {
    this.flushFrames();
    const entry = redo ? await this.undo.redo() : await this.undo.undo();
    this.r.flash(entry ? `${redo ? "Redid" : "Undid"} ${entry.label}` : `Nothing to ${redo ? "redo" : "undo"}`);
  }
}
