// Import page: the upload is sent with XMLHttpRequest so that a progress bar shows the bytes sent from the
// click on; the server's answer is followed as a normal submit would (the job's page, or the form with its
// errors). Without scripts the form posts as usual.
import { progressLine } from "../lib/long_work";

const form = document.getElementById("import-form") as HTMLFormElement | null;

function megabytes(bytes: number): string {
  return (bytes / 1e6).toFixed(1);
}

form?.addEventListener("submit", (event) => {
  event.preventDefault();
  const button = form.querySelector<HTMLButtonElement>("button[type=submit]");
  const line = progressLine(form, "upload-status");
  line.set("Uploading…", 0);
  if (button) button.disabled = true;
  const request = new XMLHttpRequest();
  request.open("POST", form.action || location.href);
  request.upload.addEventListener("progress", (e) => {
    if (!e.lengthComputable) return line.set(`Uploading: ${megabytes(e.loaded)} MB sent…`, null);
    const done = e.loaded >= e.total;
    line.set(
      done ? "Uploaded; queuing the import…" : `Uploading: ${megabytes(e.loaded)} of ${megabytes(e.total)} MB…`,
      e.loaded / e.total,
    );
  });
  request.addEventListener("load", () => {
    if (request.status < 400 && request.responseURL && request.responseURL !== location.href) {
      location.assign(request.responseURL); // the job's page
      return;
    }
    document.open();
    document.write(request.responseText); // the form with what to fix, as the server rendered it
    document.close();
  });
  request.addEventListener("error", () => {
    line.set("The upload failed (connection lost); try again.", 0);
    if (button) button.disabled = false;
  });
  request.send(new FormData(form));
});
