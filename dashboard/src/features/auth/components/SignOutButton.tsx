import { useNavigate } from 'react-router';

import { useSession } from '@/lib/session';

export function SignOutButton() {
  const { session, signOut } = useSession();
  const navigate = useNavigate();
  if (!session) return null;
  return (
    <button
      type="button"
      onClick={() => {
        signOut();
        void navigate('/sign-in', { replace: true });
      }}
    >
      Sign out
    </button>
  );
}
