// Proposal-generation job page: polls the job over the API and moves the progress bar; cancel asks the
// API to stop it. When the job ends the page reloads once, and the server renders the result.
import { api, pageData } from "../lib/api";

interface ProposalJob {
  status: string;
  done: number;
  total: number;
  percent: number;
  finished: boolean;
  error: string;
  url: string;
}

const POLL_MS = 400;
const { job: jobId } = pageData("proposal_job");
const url = `/api/proposal-jobs/${jobId}`;
const panel = document.getElementById("proposal-progress") as HTMLElement;
const bar = document.getElementById("proposal-bar") as HTMLProgressElement;
const count = document.getElementById("proposal-count") as HTMLElement;
const statusEl = document.getElementById("proposal-status") as HTMLElement;
const cancel = document.getElementById("proposal-cancel") as HTMLButtonElement | null;

function show(job: ProposalJob): void {
  // the bar only moves forward (a late answer never takes it back)
  bar.value = Math.max(bar.value, job.percent);
  bar.textContent = `${job.percent}%`;
  count.textContent = `${job.done} of ${job.total || "?"} episode(s)`;
  statusEl.textContent = job.status;
  panel.dataset.status = job.status;
}

async function poll(): Promise<void> {
  try {
    const job = await api<ProposalJob>(url);
    show(job);
    if (job.finished) {
      location.reload();
      return;
    }
  } catch (error) {
    statusEl.textContent = `could not read the job (${error instanceof Error ? error.message : error}); retrying`;
  }
  window.setTimeout(poll, POLL_MS);
}

cancel?.addEventListener("click", async () => {
  cancel.disabled = true;
  try {
    show(await api<ProposalJob>(`${url}/cancel`, { method: "POST" }));
  } catch (error) {
    statusEl.textContent = `cancel failed: ${error instanceof Error ? error.message : error}`;
    cancel.disabled = false;
  }
});

window.setTimeout(poll, POLL_MS);
