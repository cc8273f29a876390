// Project page: bulk proposal actions (generate, accept all, reject all) through the REST API; generating
// starts a background job and goes to its page.
import { api, pageData } from "../lib/api";

const { api: projectApi } = pageData("projects");
const statusEl = document.getElementById("proposal-status") as HTMLElement;

for (const button of document.querySelectorAll<HTMLButtonElement>("#proposals [data-action]")) {
  button.addEventListener("click", async () => {
    const action = button.dataset.action as string;
    const kind = button.dataset.kind ?? "all";
    if (action === "reject" && !confirm("Reject every open proposal in this project?")) return;
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
