// Mistakes the declarations must catch (tests/test_web_package.py expects these two errors):
// a level given as text, and a view read before it may exist.

import { Session } from "segshuffle-web";
const session = new Session({ shufflerUrl: "https://s.example", campaignId: "c" });
session.submitLevel("high");
session.view.config;
