import preact from "@preact/preset-vite";
import { defineConfig } from "vitest/config";

// The bundle goes into the Python package, which serves it (`parley serve`): no Node.js
// on a user's machine. File names carry a hash of their content, so a build from the same
// lockfile is byte-for-byte the committed one (tests/web/test_bundle.py checks).
export default defineConfig({
  plugins: [preact({ devtoolsInProd: false, prefreshEnabled: false })],
  base: "/",
  build: {
    outDir: "../src/parley/web/static",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    modulePreload: { polyfill: false },
    reportCompressedSize: false,
    chunkSizeWarningLimit: 600,
  },
  server: {
    proxy: { "/v1": "http://127.0.0.1:8000", "/connect": "http://127.0.0.1:8000" },
  },
  test: {
    environment: "happy-dom",
    include: ["src/**/*.test.ts", "src/**/*.test.tsx"],
    setupFiles: ["src/markdown.testenv.ts"],
  },
});
