// Project page: bulk proposal actions (generate, accept all, reject all) through the REST API.
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
        const r = await api<{ episodes: number; frames_created: number; windows_created: number }>(
          `${projectApi}/proposals/generate`,
          { method: "POST", json: {} },
        );
        statusEl.textContent = `Generated for ${r.episodes} episodes: ${r.frames_created} frame, ${r.windows_created} window proposals new.`;
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
