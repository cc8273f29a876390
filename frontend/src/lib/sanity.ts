// The sanity check's notice (training/evaluation/metrics.py sanity_check), shown where a model is judged: the job and
// evaluation pages (the deploy page renders the same notice on the server).

const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

/** The findings and what to try, or nothing when the model passed (or was not judged). */
export function sanityNotice(findings: string[]): string {
  if (!findings.length) return "";
  const items = findings.map((s) => `<li>${esc(s)}</li>`).join("");
  return `<div class="notice bad" data-sanity="failed" role="alert"><b>This model is unlikely to be a useful reward.</b>
    <ul>${items}</ul>
    <p>What to try: label more episodes with both outcomes; crop to where the task happens (<code>crop</code>, e.g.
    <code>[0.2, 0.25, 0.5, 0.5]</code>) at the camera's resolution; a higher learning rate (1e-3) with the cosine
    schedule and more epochs; then compare the new model here.</p></div>`;
}
