// Proposals on the labeling page: accept or reject them here (the selection, else the frame and the window
// at the cursor) or in the whole episode, with undo; generate them for this episode.
import type { Renderer } from "./render";
import type { LabelingState } from "./state";
import type { Writer } from "./writes";

interface Scope {
  kind: "frame" | "window" | "all";
  episode: string;
  start?: number;
  end?: number;
}

interface Decision {
  frames: number;
  windows: number;
  previous_frames: Record<string, { index: number; value: string | null }[]>;
  previous_windows: Record<string, { start: number; end: number; value: string | null }[]>;
}

export class Proposals {
  constructor(
    private readonly s: LabelingState,
    private readonly r: Renderer,
    private readonly w: Writer,
  ) {}

  /** The selection, or else the frame and the window at the cursor. */
  here(): Scope[] {
    const { uuid, indexOf } = this.s;
    const sel = this.s.selection();
    if (sel) return [{ kind: "all", episode: uuid, start: indexOf[sel[0]], end: indexOf[sel[1]] }];
    const cursor = this.s.view.cursor;
    const scopes: Scope[] = [{ kind: "frame", episode: uuid, start: indexOf[cursor], end: indexOf[cursor] }];
    const span = this.s.windowSpan();
    if (span) scopes.push({ kind: "window", episode: uuid, start: indexOf[span[0]], end: indexOf[span[1]] });
    return scopes;
  }

  episode(): Scope[] {
    return [{ kind: "all", episode: this.s.uuid }];
  }

  async decide(action: "accept" | "reject", scopes: Scope[]): Promise<void> {
    const { uuid, projectApi, episodeApi } = this.s;
    const w = this.w;
    w.flushFrames();
    const results = await Promise.all(
      scopes.map((scope) => w.send<Decision>(`${projectApi}/proposals/${action}`, { method: "POST", json: scope })),
    );
    await w.reloadQueued();
    const count = results.reduce((sum, r) => sum + (r ? r.frames + r.windows : 0), 0);
    this.r.flash(
      count ? `${action === "accept" ? "Accepted" : "Rejected"} ${count} proposal${count === 1 ? "" : "s"}` : "No open proposals here",
    );
    if (!count) return;
    const previousFrames = results.flatMap((r) => r?.previous_frames[uuid] ?? []);
    const previousWindows = results.flatMap((r) => r?.previous_windows[uuid] ?? []);
    w.undo.push({
      label: `${action} proposals`,
      undo: async () => {
        if (previousFrames.length) w.send(`${episodeApi}/frame-labels`, { method: "PUT", json: { items: previousFrames } });
        if (previousWindows.length) w.send(`${episodeApi}/window-labels`, { method: "POST", json: { items: previousWindows } });
        await Promise.all(scopes.map((scope) => w.send(`${projectApi}/proposals/reopen`, { method: "POST", json: scope })));
        await w.reloadQueued();
      },
      redo: async () => {
        await Promise.all(scopes.map((scope) => w.send(`${projectApi}/proposals/${action}`, { method: "POST", json: scope })));
        await w.reloadQueued();
      },
    });
  }

  async generate(): Promise<void> {
    const result = await this.w.send<{ frames_created: number; windows_created: number }>(
      `${this.s.projectApi}/proposals/generate`,
      { method: "POST", json: { episode: this.s.uuid } },
    );
    await this.w.reloadQueued();
    if (result) this.r.flash(`Proposals: ${result.frames_created} new frame, ${result.windows_created} new window`);
  }
}
