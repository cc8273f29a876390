// Project page: bulk proposal actions (generate, accept all, reject all) through the REST API; generating
// starts a background job and goes to its page; the LeRobot export runs in the background with progress.
import { api, pageData } from "../lib/api";
import { progressLine } from "../lib/long_work";

const { api: projectApi } = pageData("projects");
const statusEl = document.getElementById("proposal-status") as HTMLElement;

for (const button of document.querySelectorAll<HTMLButtonElement>("#proposals [data-action]")) {
  button.addEventListener("click", async () => {
    const action = button.dataset.action as string;
    const kind = button.dataset.kind ?? "all";
    if (!confirmBulk(action, kind)) return;
    button.disabled = true;
    statusEl.textContent = "Working…";
    try {
      if (action === "generate") {
        // every episode of the project: a background job, followed on its own page
        const job = await api<{ page: string }>(`${projectApi}/proposals/generate`, { method: "POST", json: {} });
        location.assign(job.page);
        return;
      } else {
        const r = await api<{ frames: number; windows: number }>(`${projectApi}/proposals/${action}`, {
          method: "POST",
          json: { kind },
        });
        statusEl.textContent = `${action === "accept" ? "Accepted" : "Rejected"} ${r.frames} frame and ${r.windows} window proposals.`;
      }
      statusEl.dataset.done = action;
      window.setTimeout(() => location.reload(), 600);
    } catch (error) {
      statusEl.textContent = `Failed: ${error instanceof Error ? error.message : error}`;
    } finally {
      button.disabled = false;
    }
  });
}

// Accepting writes a label for every open proposal and rejecting drops them all: both ask first, with the count
// the page shows.
function confirmBulk(action: string, kind: string): boolean {
  if (action !== "accept" && action !== "reject") return true;
  const count = (id: string) => Number(document.getElementById(id)?.textContent ?? 0);
  const [frames, windows] = [count("open-frames"), count("open-windows")];
  if (action === "reject") return confirm(`Reject every open proposal in this project (${frames} frame, ${windows} window)?`);
  const n = kind === "window" ? windows : frames;
  return confirm(`Accept all ${n} open ${kind} proposals? Each becomes a ${kind} label in this project.`);
}

// "Export LeRobot dataset": a background export (POST), its progress polled twice a second, then the
// download; the link still works without scripts (it builds the zip while the request waits).
interface ExportState { status: string; done: number; total: number; error?: string; detail?: string }

const exportLink = document.querySelector<HTMLAnchorElement>('.actions a[href$="/export/lerobot/"]');
exportLink?.addEventListener("click", async (event) => {
  event.preventDefault();
  if (exportLink.getAttribute("aria-disabled") === "true") return; // one export at a time from this page
  const line = progressLine(exportLink.closest(".actions") ?? exportLink, "export-status");
  line.set("Starting the export…");
  exportLink.setAttribute("aria-disabled", "true");
  try {
    const job = await api<ExportState & { status_url: string; download_url: string }>(exportLink.pathname, {
      method: "POST",
    });
    let state: ExportState = job;
    while (state.status === "queued" || state.status === "running") {
      line.set(
        state.status === "queued"
          ? `Export queued: ${state.total} episode(s) to write…`
          : `Writing episode ${Math.min(state.done + 1, state.total)} of ${state.total}…`,
        state.status === "running" && state.total ? state.done / state.total : null,
      );
      await new Promise((resolve) => window.setTimeout(resolve, 500));
      state = await api<ExportState>(job.status_url);
    }
    if (state.status !== "succeeded") throw new Error(state.error || state.status);
    line.set(`Export ready: ${state.total} episode(s). `, 1);
    const download = document.createElement("a");
    download.id = "export-download";
    download.href = job.download_url;
    download.textContent = "Download the zip";
    line.element.append(download);
    line.element.dataset.done = "1";
    location.assign(job.download_url);
  } catch (error) {
    line.set(`Export failed: ${error instanceof Error ? error.message : error}`, 0);
    line.element.classList.add("error");
  } finally {
    exportLink.removeAttribute("aria-disabled");
  }
});
