// The labeling page's state in one object: the episode as the server sent it, the labels on screen (model),
// where the person is (cursor, selection, playback, a held key), and the queries every other part asks.
import type { EpisodeLabelingData, LabelingWindow } from "../../generated/page-data";
import type { WindowMark } from "../../lib/timeline";

export type FrameValue = "success" | "fail";
export type WindowValue = "positive" | "negative" | "unclear";
export type ShownWindow = WindowMark & { score: number | null };

/** The labels on screen, by position (0..n-1, not step index); the timeline draws this object. */
export interface LabelModel {
  length: number;
  reward: number[];
  human: (string | null)[];
  proposal: (string | null)[];
  proposalStatus: (string | null)[];
  windows: ShownWindow[];
}

export interface ViewState {
  cursor: number;
  anchor: number | null;
  playing: boolean;
  fps: number;
  held: FrameValue | null;
  autoAdvance: boolean;
}

export class LabelingState {
  readonly uuid: string;
  readonly projectApi: string;
  readonly episodeApi: string;
  readonly cameras: string[];
  readonly indexOf: number[]; // position -> step index
  readonly positionOf: Map<number, number>;
  readonly n: number;
  readonly windowSize: number;
  readonly stride: number;
  readonly model: LabelModel;
  readonly view: ViewState = { cursor: 0, anchor: null, playing: false, fps: 10, held: null, autoAdvance: false };

  constructor(readonly data: EpisodeLabelingData) {
    this.uuid = data.episode.uuid;
    this.projectApi = `/api/projects/${data.project.id}`;
    this.episodeApi = `/api/episodes/${this.uuid}`;
    this.cameras = data.project.cameras;
    this.indexOf = data.steps.index;
    this.positionOf = new Map(this.indexOf.map((index, position) => [index, position]));
    this.n = this.indexOf.length;
    this.windowSize = Math.max(1, data.project.window_size);
    this.stride = Math.max(1, data.project.stride);
    this.model = {
      length: this.n,
      reward: data.steps.reward,
      human: [...data.frame_labels.human],
      proposal: [...data.frame_labels.proposal],
      proposalStatus: [...data.frame_labels.proposal_status],
      windows: [],
    };
    this.loadWindows(data.windows);
  }

  /** Takes the labels of a fresh copy of the episode (a reload). */
  loadLabels(fresh: EpisodeLabelingData): void {
    this.model.human = fresh.frame_labels.human;
    this.model.proposal = fresh.frame_labels.proposal;
    this.model.proposalStatus = fresh.frame_labels.proposal_status;
    this.loadWindows(fresh.windows);
  }

  loadWindows(rows: LabelingWindow[]): void {
    const { positionOf } = this;
    this.model.windows = rows
      .filter((w) => positionOf.has(w.start) && positionOf.has(w.end))
      .map((w) => ({ ...w, start: positionOf.get(w.start)!, end: positionOf.get(w.end)! }));
  }

  selection(): [number, number] | null {
    const { anchor, cursor } = this.view;
    if (anchor === null) return null;
    return [Math.min(anchor, cursor), Math.max(anchor, cursor)];
  }

  /** The window at the cursor (the last full one near the end); null when the episode is shorter. */
  windowSpan(): [number, number] | null {
    if (this.n < this.windowSize) return null;
    const start = Math.max(0, Math.min(this.view.cursor, this.n - this.windowSize));
    return [start, start + this.windowSize - 1];
  }

  humanWindow(start: number, end: number): ShownWindow | undefined {
    return this.model.windows.find((w) => w.source === "human" && w.start === start && w.end === end);
  }

  applyWindow(start: number, end: number, value: string | null): void {
    const existing = this.humanWindow(start, end);
    if (value === null) this.model.windows = this.model.windows.filter((w) => w !== existing);
    else if (existing) existing.value = value;
    else this.model.windows.push({ start, end, value, source: "human", status: "open", score: null });
  }

  findFrom(start: number, direction: 1 | -1, test: (p: number) => boolean): number | null {
    for (let p = start + direction; p >= 0 && p < this.n; p += direction) if (test(p)) return p;
    return null;
  }

  proposalRunStart(p: number): boolean {
    const { proposal, proposalStatus } = this.model;
    return proposalStatus[p] === "open" && (p === 0 || proposalStatus[p - 1] !== "open" || proposal[p - 1] !== proposal[p]);
  }

  hasProposals(): boolean {
    return this.model.proposal.some((v) => v !== null) || this.model.windows.some((w) => w.source !== "human");
  }
}
