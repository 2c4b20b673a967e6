import { render } from "preact";
import { App } from "./app";
import { lang } from "./i18n";
import "./styles.css";
import { applyTheme } from "./theme";

applyTheme();
document.documentElement.lang = lang.value === "zh" ? "zh-CN" : "en";
render(<App />, document.getElementById("app")!);
