// Undo and redo as a stack of operations that each know their inverse (API calls that restore the old values).

export interface UndoEntry {
  label: string;
  undo: () => Promise<void> | void;
  redo: () => Promise<void> | void;
}

export class UndoStack {
  private done: UndoEntry[] = [];
  private undone: UndoEntry[] = [];

  constructor(private limit = 500) {}

  push(entry: UndoEntry): void {
    this.done.push(entry);
    if (this.done.length > this.limit) this.done.shift();
    this.undone = [];
  }

  get canUndo(): boolean {
    return this.done.length > 0;
  }

  get canRedo(): boolean {
    return this.undone.length > 0;
  }

  async undo(): Promise<UndoEntry | null> {
    const entry = this.done.pop();
    if (!entry) return null;
    this.undone.push(entry);
    await entry.undo();
    return entry;
  }

  async redo(): Promise<UndoEntry | null> {
    const entry = this.undone.pop();
    if (!entry) return null;
    this.done.push(entry);
    await entry.redo();
    return entry;
  }
}

/** Runs async jobs one after another, so writes reach the server in the order they were made. */
export class SerialQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private count = 0;

  constructor(private onIdleChange: (busy: boolean) => void = () => {}) {}

  get busy(): boolean {
    return this.count > 0;
  }

  run<T>(job: () => Promise<T>): Promise<T> {
    this.count++;
    this.onIdleChange(true);
    const result = this.tail.then(job, job);
    this.tail = result.catch(() => undefined).finally(() => {
      this.count--;
      if (this.count === 0) this.onIdleChange(false);
    });
    return result;
  }
}
