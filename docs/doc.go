// Package docs holds cohort's documentation (the Markdown pages next to this
// file) and TestREADMEQuickstart, which runs the README's quickstart blocks as
// written so that they cannot rot. It has no code of its own.
package docs
