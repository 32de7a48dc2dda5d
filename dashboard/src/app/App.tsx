import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { useState } from 'react';
import { RouterProvider } from 'react-router';

import { SessionProvider } from '@/lib/session';

import { createAppRouter } from './routes';

export function createQueryClient() {
  return new QueryClient({
    defaultOptions: {
      queries: {
        staleTime: 2000,
        retry: (failures, error) => {
          const status = (error as { status?: number }).status;
          // 4xx answers do not change by asking again
          if (typeof status === 'number' && status >= 400 && status < 500 && status !== 429) return false;
          return failures < 2;
        },
      },
      mutations: { retry: false },
    },
  });
}

export function App() {
  const [queryClient] = useState(createQueryClient);
  const [router] = useState(createAppRouter);
  return (
    <QueryClientProvider client={queryClient}>
      <SessionProvider>
        <RouterProvider router={router} />
      </SessionProvider>
    </QueryClientProvider>
  );
}
