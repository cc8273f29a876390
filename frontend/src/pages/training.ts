// Project training page: the job form shows the ResNet fields or a JSON config by kind, prefilled with
// that kind's defaults; "Queue job" and "Create snapshot" say so at once while the server answers.
import { pageData } from "../lib/api";
import { progressLine } from "../lib/long_work";

const data = pageData("training");
const form = document.getElementById("job-form") as HTMLFormElement | null;
const kind = form?.querySelector<HTMLSelectElement>("select[name=kind]");
const json = form?.querySelector<HTMLTextAreaElement>("textarea[name=config_json]");
const resnetOnly = form ? Array.from(form.querySelectorAll<HTMLElement>(".form-grid .field")).filter(
  (el) => !/field-(snapshot|kind|name)\b/.test(el.className),
) : [];

function sync(): void {
  if (!kind || !json) return;
  const isResnet = kind.value === "resnet";
  for (const el of resnetOnly) el.hidden = !isResnet;
  for (const id of ["job-presets", "job-advanced", "job-parallel"]) {
    const el = document.getElementById(id);
    if (el) el.hidden = !isResnet; // ResNet presets and settings; other kinds send a JSON config
  }
  const box = document.getElementById("config-json");
  if (box) box.hidden = isResnet;
  if (!isResnet && !json.value.trim()) {
    const defaults = data.default_configs[kind.value];
    json.value = defaults ? JSON.stringify(defaults, null, 2) : "{}";
  }
}

kind?.addEventListener("change", sync);
sync();

for (const [id, text] of [["job-form", "Queueing the job…"], ["snapshot-form", "Starting the snapshot…"]]) {
  const target = document.getElementById(id) as HTMLFormElement | null;
  target?.addEventListener("submit", () => {
    const button = target.querySelector<HTMLButtonElement>("button[type=submit]");
    progressLine(button?.parentElement ?? target, `${id}-status`).set(text, null);
    window.setTimeout(() => { if (button) button.disabled = true; }); // after the form's data is taken
  });
}
