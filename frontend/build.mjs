// Bundles every page entry in src/pages/ into dist/pages/<name>.js (ES modules, minified, with source maps),
// and copies stylesheets to dist/styles/. Django serves dist/ as static files.
import { build, context } from "esbuild";
import { cpSync, existsSync, mkdirSync, readdirSync } from "node:fs";

const pages = (existsSync("src/pages") ? readdirSync("src/pages") : []).filter((f) => /\.(ts|js)$/.test(f)).map((f) => `src/pages/${f}`);
const options = {
  entryPoints: pages,
  outdir: "dist/pages",
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  sourcemap: true,
  logLevel: "warning",
  loader: { ".css": "css" },
};

mkdirSync("dist/styles", { recursive: true });
cpSync("src/styles", "dist/styles", { recursive: true });
cpSync("node_modules/uplot/dist/uPlot.min.css", "dist/styles/uPlot.min.css");
if (process.argv.includes("--watch")) {
  const ctx = await context(options);
  await ctx.watch();
} else {
  await build(options);
}
