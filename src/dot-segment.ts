/**
 * "." and "..", which no group name or deployment id may be: the admin API names them in its
 * paths (/admin/v1/groups/{group}/deployments/{id}), where either is a dot segment that every HTTP
 * client (fetch, curl, the CLI) takes out before sending, percent-encoded or not. A deployment
 * ".." could not be drained, and `DELETE …/deployments/..` arrives as `DELETE /groups/{group}`.
 */
export function isDotSegment(name: string): boolean {
  return name === "." || name === "..";
}

export const DOT_SEGMENT_REFUSED = 'must not be "." or "..": the admin API names it in a URL path, where clients take those out';
