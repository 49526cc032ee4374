/**
 * The buttons of a tool permission question and the answer each gives: `Allow` / `Deny`, or, for
 * an ACP agent's question, the agent's own options (by name), answered with the picked `optionId`.
 */
import type { PermissionOption, RequestPermissionResult } from './protocol';

/** The buttons' titles, in order. */
export function permissionButtons(options: readonly PermissionOption[] | null | undefined): string[] {
  return options && options.length > 0 ? options.map((o) => o.name) : ['Allow', 'Deny'];
}

/** The answer for the button picked (`undefined`: the question was dismissed). */
export function permissionAnswer(
  options: readonly PermissionOption[] | null | undefined,
  choice: string | undefined,
): RequestPermissionResult {
  if (options && options.length > 0) {
    const option = options.find((o) => o.name === choice);
    if (option === undefined) return { allow: false, message: 'Denied: the question was dismissed.' };
    const allow = option.kind.startsWith('allow');
    return allow ? { allow, optionId: option.optionId } : { allow, message: 'Denied by the user.', optionId: option.optionId };
  }
  if (choice === 'Allow') return { allow: true };
  return { allow: false, message: choice === 'Deny' ? 'Denied by the user.' : 'Denied: the question was dismissed.' };
}
